select c.id, c.name from customers c join gate g on g.open = 1
