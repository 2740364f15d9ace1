-- Units and revenue per product, returned orders excluded.
select
    p.product_id,
    p.product_name,
    p.category,
    coalesce(sum(o.quantity), 0) as units_sold,
    coalesce(round(sum(o.amount), 2), 0) as revenue
from stg_products as p
left join orders_enriched as o
    on o.product_id = p.product_id and o.status <> 'returned'
group by p.product_id, p.product_name, p.category
