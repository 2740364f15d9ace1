-- One row per order line (this shop sells one product per order).
select
    order_id,
    customer_id,
    product_id,
    quantity,
    date(ordered_at) as order_date,
    status
from raw_orders
