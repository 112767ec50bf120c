SELECT set_config('statement_timeout', %(timeout)s, false), t.id, t.workspace_id, t.kind, t.agent_id, t.run_id , r.conversation_id, r.requester_id, r.current_message_id, r.recent_message_ids FROM (SELECT 1) AS one LEFT JOIN messages_app_apitoken AS t ON t.workspace_id = %(workspace)s AND t.digest = %(digest)s AND t.revoked_at IS NULL LEFT JOIN messages_app_run AS r ON r.workspace_id = t.workspace_id AND r.id = t.run_id

SELECT m.id, m.conversation_id, m.seq, m.role, m.status, m.sender_account_id, m.sender_agent_id, m.reply_to_id, m.thread_id, m.content, m.created_at, m.sources_erased FROM messages_app_message AS m WHERE m.id = %(id)s AND m.workspace_id = %(ws)s AND m.deleted_at IS NULL AND EXISTS (SELECT 1 FROM messages_app_membership AS member WHERE member.workspace_id = %(ws)s AND member.agent_id = %(agent)s AND member.conversation_id = m.conversation_id AND member.left_at IS NULL)

RESET statement_timeout
