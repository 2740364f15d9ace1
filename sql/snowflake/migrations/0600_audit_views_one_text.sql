-- Issue 18: the audit views read the projection's recursive CTEs from
-- projection.sql (its query `states`) instead of repeating them, so the
-- per-run projection and dvt_event_states cannot drift. Stores created
-- before get the views again from that single text; what they compute is
-- unchanged.
/*include audit_views.sql views*/;
