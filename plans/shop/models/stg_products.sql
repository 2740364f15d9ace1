-- The catalogue; unit_price is in euros.
select
    product_id,
    product_name,
    lower(category) as category,
    unit_price
from raw_products
