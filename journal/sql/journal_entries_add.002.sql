-- Several entries at once, in order: [{"task", "step", "kind", "actor", "data"}, ...].
CREATE OR REPLACE FUNCTION journal_entries_add(p_entries jsonb) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_entry jsonb;
    v_count integer := 0;
BEGIN
    FOR v_entry IN SELECT e FROM jsonb_array_elements(p_entries) WITH ORDINALITY AS a(e, i)
                    ORDER BY i LOOP
        PERFORM journal_entry_add(
            p_task => (v_entry->>'task')::uuid, p_step => (v_entry->>'step')::bigint,
            p_kind => v_entry->>'kind', p_actor => v_entry->>'actor',
            p_data => v_entry->'data');
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;
