"""Only agent-authored messages carry lineage, and a message's sender never changes.

The services already refuse lineage on a person's message; these triggers make it a database
invariant, because the perspective rules rely on it: a person's message needs no lineage
look-up (search_app/perspective.py), which keeps searches over many matches cheap.
"""

from django.db import migrations

FORWARD = """
CREATE FUNCTION formation_lineage_needs_agent_message() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM messages_app_message
                   WHERE id = NEW.message_id AND sender_agent_id IS NOT NULL) THEN
        RAISE EXCEPTION 'only agent-authored messages carry lineage'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER lineage_needs_agent_message
BEFORE INSERT OR UPDATE OF message_id ON messages_app_messagelineage
FOR EACH ROW EXECUTE FUNCTION formation_lineage_needs_agent_message();

CREATE FUNCTION formation_message_sender_is_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.sender_agent_id IS DISTINCT FROM OLD.sender_agent_id
       OR NEW.sender_account_id IS DISTINCT FROM OLD.sender_account_id THEN
        RAISE EXCEPTION 'a message''s sender never changes'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER message_sender_is_fixed
BEFORE UPDATE OF sender_agent_id, sender_account_id ON messages_app_message
FOR EACH ROW EXECUTE FUNCTION formation_message_sender_is_fixed();
"""

BACKWARD = """
DROP TRIGGER message_sender_is_fixed ON messages_app_message;
DROP FUNCTION formation_message_sender_is_fixed();
DROP TRIGGER lineage_needs_agent_message ON messages_app_messagelineage;
DROP FUNCTION formation_lineage_needs_agent_message();
"""


class Migration(migrations.Migration):
    dependencies = [("messages_app", "0006_lineage_closure_run_evidence")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
