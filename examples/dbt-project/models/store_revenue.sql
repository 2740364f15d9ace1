{{ config(materialized='table', tags=['nightly']) }}

select
    s.store_id,
    s.city,
    count(*) as sales,
    round(sum(x.amount), 2) as revenue
from {{ ref('raw_stores') }} as s
join {{ ref('stg_sales') }} as x on x.store_id = s.store_id
group by s.store_id, s.city
