-- The schema a session builds in, shared by the state store and the
-- warehouse (store/postgres/schema.go): both create what the search_path
-- names first when it does not exist yet, so that store and warehouse may
-- live in schemas of their own on one database (search_path=dvt_state).

-- name: missing_schema
-- The schema the search_path names first ("$user": the session's user),
-- when current_schema() is NULL because that schema does not exist; NULL
-- otherwise, or when the search_path is empty.
SELECT CASE WHEN current_schema() IS NULL THEN (
    SELECT CASE WHEN p.s = '$user' THEN session_user::text ELSE p.s END
    FROM unnest(string_to_array(current_setting('search_path'), ',')) WITH ORDINALITY AS a(raw, i)
    CROSS JOIN LATERAL (SELECT btrim(btrim(a.raw), '"') AS s) AS p
    WHERE p.s <> ''
    ORDER BY a.i
    LIMIT 1
) END;

-- name: schema_lock
-- Creators of a schema take turns: concurrent CREATE SCHEMA IF NOT EXISTS
-- of one name can fail on the catalog's unique index.
SELECT pg_advisory_xact_lock(hashtext('dvtrun/schema'));
