-- The orders that count: returned ones are left out.
select
    order_id,
    customer,
    amount,
    ordered_at,
    status
from {{ ref('raw_orders') }}
where status <> 'returned'
