-- Every customer, including those who never ordered (zero, not NULL).
with kept as (
    select * from orders_enriched where status <> 'returned'
)
select
    c.customer_id,
    c.first_name,
    c.city,
    count(k.order_id) as number_of_orders,
    min(k.order_date) as first_order_date,
    coalesce(round(sum(k.amount), 2), 0) as lifetime_value
from stg_customers as c
left join kept as k on k.customer_id = c.customer_id
group by c.customer_id, c.first_name, c.city
