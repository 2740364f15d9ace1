-- One row per customer, as signed up.
select
    customer_id,
    trim(first_name) as first_name,
    city,
    date(signup_date) as signup_date
from raw_customers
