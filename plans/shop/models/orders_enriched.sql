-- Orders with their product and amount. Returned orders keep their amount
-- here; the summaries below leave them out.
select
    o.order_id,
    o.customer_id,
    o.product_id,
    p.category,
    o.order_date,
    o.status,
    o.quantity,
    round(o.quantity * p.unit_price, 2) as amount
from stg_orders as o
join stg_products as p on p.product_id = o.product_id
