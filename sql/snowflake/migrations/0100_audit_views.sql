-- Audit views (issue #5): their definitions are sql/snowflake/audit_views.sql's
-- statement list `views`, which reads the projection's CTEs from
-- projection.sql. A store created now gets the latest views here;
-- 0180 and 0190 once changed them and are kept as empty steps of the
-- sequence, and 0600 recreated them for stores created before.
/*include audit_views.sql views*/;
