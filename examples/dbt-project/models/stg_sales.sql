select
    sale_id,
    store_id,
    item,
    quantity,
    round(quantity * unit_price, 2) as amount,
    sold_on
from {{ ref('raw_sales') }}
