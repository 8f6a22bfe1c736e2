//! The sidecar's durable state (`agentos_core_*`): sessions with their
//! denormalized history counters, the event log, prompts with idempotency,
//! permission records and the bounded outcome tombstones, bounded tombstones of
//! deleted sessions, plus one VM-wide
//! counter row so that limits are checked without `COUNT(` scans; and the
//! signed control plane's state (migration 4): accounts and their signers,
//! agents with their collaborators and session links, model providers,
//! encrypted secrets and the idempotency records of signed actions; and
//! (migration 5) agents' tool documents and a session title's source; and
//! (migration 6) runs, their journals and event waits, and a session's plan.

use crate::migrate::Migration;

/// Largest sequence number: 2^53 - 1, so sequences survive a JSON round trip.
pub const MAX_SEQUENCE: i64 = 9_007_199_254_740_991;

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        statements: &[
            "CREATE TABLE agentos_core_sessions (
                session_id TEXT PRIMARY KEY CHECK (length(session_id) BETWEEN 1 AND 256),
                agent TEXT NOT NULL CHECK (length(agent) BETWEEN 1 AND 256),
                acp_session_id TEXT CHECK (acp_session_id IS NULL OR length(acp_session_id) >= 1),
                cwd TEXT NOT NULL CHECK (substr(cwd, 1, 1) = '/'),
                permission_policy TEXT NOT NULL
                    CHECK (permission_policy IN ('allow_all', 'reject_all', 'ask')),
                skip_os_instructions INTEGER NOT NULL DEFAULT 0 CHECK (skip_os_instructions IN (0, 1)),
                additional_instructions TEXT,
                additional_directories_json TEXT NOT NULL DEFAULT '[]'
                    CHECK (json_valid(additional_directories_json)
                           AND json_type(additional_directories_json) = 'array'),
                env_json TEXT NOT NULL DEFAULT '{}'
                    CHECK (json_valid(env_json) AND json_type(env_json) = 'object'),
                mcp_servers_json TEXT NOT NULL DEFAULT '[]'
                    CHECK (json_valid(mcp_servers_json) AND json_type(mcp_servers_json) = 'array'),
                capabilities_json TEXT CHECK (capabilities_json IS NULL OR json_valid(capabilities_json)),
                agent_info_json TEXT CHECK (agent_info_json IS NULL OR json_valid(agent_info_json)),
                config_revision INTEGER NOT NULL DEFAULT 0 CHECK (config_revision >= 0),
                config_options_json TEXT NOT NULL DEFAULT '[]'
                    CHECK (json_valid(config_options_json) AND json_type(config_options_json) = 'array'),
                pending_preamble TEXT,
                title TEXT,
                metadata_json TEXT CHECK (metadata_json IS NULL OR json_valid(metadata_json)),
                state TEXT NOT NULL DEFAULT 'idle'
                    CHECK (state IN ('idle', 'running', 'waiting', 'failed')),
                state_prompt_id TEXT,
                state_started_at_ms INTEGER,
                state_error_json TEXT CHECK (state_error_json IS NULL OR json_valid(state_error_json)),
                latest_sequence INTEGER NOT NULL DEFAULT 0
                    CHECK (latest_sequence BETWEEN 0 AND 9007199254740991),
                oldest_retained_sequence INTEGER NOT NULL DEFAULT 1
                    CHECK (oldest_retained_sequence >= 1
                           AND oldest_retained_sequence <= latest_sequence + 1),
                retained_event_count INTEGER NOT NULL DEFAULT 0 CHECK (retained_event_count >= 0),
                retained_event_bytes INTEGER NOT NULL DEFAULT 0 CHECK (retained_event_bytes >= 0),
                prompt_count INTEGER NOT NULL DEFAULT 0 CHECK (prompt_count >= 0),
                pending_permission_count INTEGER NOT NULL DEFAULT 0
                    CHECK (pending_permission_count >= 0),
                outcome_count INTEGER NOT NULL DEFAULT 0 CHECK (outcome_count >= 0),
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= created_at_ms),
                CHECK ((state = 'idle') = (state_prompt_id IS NULL AND state_started_at_ms IS NULL)),
                CHECK ((state = 'failed') = (state_error_json IS NOT NULL))
            ) STRICT",
            "CREATE INDEX agentos_core_sessions_by_activity
                ON agentos_core_sessions (updated_at_ms DESC, session_id)",
            "CREATE TABLE agentos_core_events (
                session_id TEXT NOT NULL,
                sequence INTEGER NOT NULL CHECK (sequence BETWEEN 1 AND 9007199254740991),
                occurred_at_ms INTEGER NOT NULL,
                acp_protocol_version INTEGER NOT NULL CHECK (acp_protocol_version >= 1),
                event_kind TEXT NOT NULL
                    CHECK (event_kind IN ('session_update', 'permission_request', 'permission_response')),
                correlation_id TEXT
                    CHECK (correlation_id IS NULL OR length(correlation_id) BETWEEN 1 AND 256),
                payload_json TEXT NOT NULL CHECK (json_valid(payload_json)),
                payload_bytes INTEGER NOT NULL
                    CHECK (payload_bytes = length(CAST(payload_json AS BLOB))),
                outcome_status TEXT CHECK (outcome_status IS NULL OR outcome_status IN ('accepted', 'not_pending')),
                terminal_reason TEXT CHECK (terminal_reason IS NULL OR terminal_reason IN
                    ('already_resolved', 'prompt_cancelled', 'adapter_exited', 'session_deleted', 'vm_shutdown')),
                actor_kind TEXT NOT NULL CHECK (actor_kind IN ('user', 'agent', 'system')),
                actor_account TEXT CHECK (actor_account IS NULL OR length(actor_account) BETWEEN 1 AND 256),
                actor_signer TEXT CHECK (actor_signer IS NULL OR length(actor_signer) BETWEEN 1 AND 256),
                PRIMARY KEY (session_id, sequence),
                CHECK (event_kind <> 'session_update'
                       OR (correlation_id IS NULL AND outcome_status IS NULL AND terminal_reason IS NULL)),
                CHECK (event_kind <> 'permission_request'
                       OR (correlation_id IS NOT NULL AND outcome_status IS NULL AND terminal_reason IS NULL)),
                CHECK (event_kind <> 'permission_response'
                       OR (correlation_id IS NOT NULL
                           AND ((outcome_status = 'accepted' AND terminal_reason IS NULL)
                                OR (outcome_status = 'not_pending' AND terminal_reason IS NOT NULL)))),
                CHECK (actor_kind = 'user' OR (actor_account IS NULL AND actor_signer IS NULL)),
                CHECK (actor_signer IS NULL OR actor_account IS NOT NULL)
            ) STRICT",
            "CREATE TABLE agentos_core_prompts (
                session_id TEXT NOT NULL,
                prompt_id TEXT NOT NULL CHECK (length(prompt_id) BETWEEN 1 AND 256),
                idempotency_key TEXT
                    CHECK (idempotency_key IS NULL OR length(CAST(idempotency_key AS BLOB)) BETWEEN 1 AND 256),
                input_hash BLOB NOT NULL CHECK (length(input_hash) = 32),
                state TEXT NOT NULL CHECK (state IN ('accepted', 'completed', 'failed', 'cancelled')),
                result_json TEXT CHECK (result_json IS NULL OR json_valid(result_json)),
                error_json TEXT CHECK (error_json IS NULL OR json_valid(error_json)),
                first_input_sequence INTEGER,
                last_output_sequence INTEGER,
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL,
                completed_at_ms INTEGER,
                PRIMARY KEY (session_id, prompt_id),
                UNIQUE (session_id, idempotency_key),
                CHECK ((state = 'accepted' AND result_json IS NULL AND error_json IS NULL
                            AND completed_at_ms IS NULL)
                       OR (state IN ('completed', 'cancelled') AND result_json IS NOT NULL
                            AND error_json IS NULL AND completed_at_ms IS NOT NULL)
                       OR (state = 'failed' AND error_json IS NOT NULL AND result_json IS NULL
                            AND completed_at_ms IS NOT NULL))
            ) STRICT",
            "CREATE UNIQUE INDEX agentos_core_prompts_one_active
                ON agentos_core_prompts (session_id) WHERE state = 'accepted'",
            "CREATE INDEX agentos_core_prompts_by_state ON agentos_core_prompts (state)",
            "CREATE INDEX agentos_core_prompts_terminal_by_age
                ON agentos_core_prompts (completed_at_ms, session_id, prompt_id)
                WHERE state <> 'accepted'",
            "CREATE INDEX agentos_core_prompts_session_terminal_by_age
                ON agentos_core_prompts (session_id, completed_at_ms, prompt_id)
                WHERE state <> 'accepted'",
            "CREATE TABLE agentos_core_permission_records (
                session_id TEXT NOT NULL,
                request_id TEXT NOT NULL CHECK (length(request_id) BETWEEN 1 AND 256),
                prompt_id TEXT NOT NULL,
                request_kind TEXT NOT NULL DEFAULT 'permission' CHECK (request_kind = 'permission'),
                state TEXT NOT NULL CHECK (state IN ('pending', 'responded', 'terminal')),
                request_json TEXT NOT NULL CHECK (json_valid(request_json)),
                response_json TEXT CHECK (response_json IS NULL OR json_valid(response_json)),
                terminal_reason TEXT CHECK (terminal_reason IS NULL OR terminal_reason IN
                    ('accepted', 'already_resolved', 'prompt_cancelled', 'adapter_exited',
                     'session_deleted', 'vm_shutdown')),
                request_sequence INTEGER NOT NULL,
                terminal_sequence INTEGER,
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL,
                PRIMARY KEY (session_id, request_id),
                CHECK ((state = 'pending') = (terminal_reason IS NULL)),
                CHECK (state <> 'responded' OR (response_json IS NOT NULL AND terminal_reason = 'accepted'))
            ) STRICT",
            "CREATE INDEX agentos_core_permission_records_by_prompt
                ON agentos_core_permission_records (session_id, prompt_id, state)",
            "CREATE INDEX agentos_core_permission_records_pending
                ON agentos_core_permission_records (state) WHERE state = 'pending'",
            "CREATE TABLE agentos_core_permission_outcomes (
                session_id TEXT NOT NULL,
                request_id TEXT NOT NULL,
                terminal_reason TEXT NOT NULL CHECK (terminal_reason IN
                    ('accepted', 'already_resolved', 'prompt_cancelled', 'adapter_exited',
                     'session_deleted', 'vm_shutdown')),
                terminal_at_ms INTEGER NOT NULL,
                PRIMARY KEY (session_id, request_id)
            ) STRICT",
            "CREATE INDEX agentos_core_permission_outcomes_by_age
                ON agentos_core_permission_outcomes (terminal_at_ms, session_id, request_id)",
            "CREATE INDEX agentos_core_permission_outcomes_session_by_age
                ON agentos_core_permission_outcomes (session_id, terminal_at_ms, request_id)",
            "CREATE TABLE agentos_core_vm_counters (
                singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
                session_count INTEGER NOT NULL DEFAULT 0 CHECK (session_count >= 0),
                prompt_count INTEGER NOT NULL DEFAULT 0 CHECK (prompt_count >= 0),
                pending_permission_count INTEGER NOT NULL DEFAULT 0
                    CHECK (pending_permission_count >= 0),
                outcome_count INTEGER NOT NULL DEFAULT 0 CHECK (outcome_count >= 0)
            ) STRICT",
            "INSERT INTO agentos_core_vm_counters (singleton) VALUES (1)",
        ],
    },
    // 2: the event log's closed-vocabulary CHECKs as comparisons. SQLite
    // evaluates `x IN ('a', 'b', 'c')` in a CHECK by building a temporary
    // index for every row written; the same rule as `x = 'a' OR …` costs
    // a few comparisons (measured: 5.5 → 3.6 µs per appended row). Same
    // columns, same rules, rows copied as they are.
    Migration {
        version: 2,
        statements: &[
            "CREATE TABLE agentos_core_events_v2 (
                session_id TEXT NOT NULL,
                sequence INTEGER NOT NULL CHECK (sequence BETWEEN 1 AND 9007199254740991),
                occurred_at_ms INTEGER NOT NULL,
                acp_protocol_version INTEGER NOT NULL CHECK (acp_protocol_version >= 1),
                event_kind TEXT NOT NULL
                    CHECK (event_kind = 'session_update' OR event_kind = 'permission_request'
                           OR event_kind = 'permission_response'),
                correlation_id TEXT
                    CHECK (correlation_id IS NULL OR length(correlation_id) BETWEEN 1 AND 256),
                payload_json TEXT NOT NULL CHECK (json_valid(payload_json)),
                payload_bytes INTEGER NOT NULL
                    CHECK (payload_bytes = length(CAST(payload_json AS BLOB))),
                outcome_status TEXT
                    CHECK (outcome_status IS NULL OR outcome_status = 'accepted'
                           OR outcome_status = 'not_pending'),
                terminal_reason TEXT
                    CHECK (terminal_reason IS NULL OR terminal_reason = 'already_resolved'
                           OR terminal_reason = 'prompt_cancelled'
                           OR terminal_reason = 'adapter_exited'
                           OR terminal_reason = 'session_deleted'
                           OR terminal_reason = 'vm_shutdown'),
                actor_kind TEXT NOT NULL
                    CHECK (actor_kind = 'user' OR actor_kind = 'agent' OR actor_kind = 'system'),
                actor_account TEXT
                    CHECK (actor_account IS NULL OR length(actor_account) BETWEEN 1 AND 256),
                actor_signer TEXT
                    CHECK (actor_signer IS NULL OR length(actor_signer) BETWEEN 1 AND 256),
                PRIMARY KEY (session_id, sequence),
                CHECK (event_kind <> 'session_update'
                       OR (correlation_id IS NULL AND outcome_status IS NULL
                           AND terminal_reason IS NULL)),
                CHECK (event_kind <> 'permission_request'
                       OR (correlation_id IS NOT NULL AND outcome_status IS NULL
                           AND terminal_reason IS NULL)),
                CHECK (event_kind <> 'permission_response'
                       OR (correlation_id IS NOT NULL
                           AND ((outcome_status = 'accepted' AND terminal_reason IS NULL)
                                OR (outcome_status = 'not_pending'
                                    AND terminal_reason IS NOT NULL)))),
                CHECK (actor_kind = 'user' OR (actor_account IS NULL AND actor_signer IS NULL)),
                CHECK (actor_signer IS NULL OR actor_account IS NOT NULL)
            ) STRICT",
            "INSERT INTO agentos_core_events_v2 (session_id, sequence, occurred_at_ms,
                acp_protocol_version, event_kind, correlation_id, payload_json, payload_bytes,
                outcome_status, terminal_reason, actor_kind, actor_account, actor_signer)
             SELECT session_id, sequence, occurred_at_ms, acp_protocol_version, event_kind,
                correlation_id, payload_json, payload_bytes, outcome_status, terminal_reason,
                actor_kind, actor_account, actor_signer
             FROM agentos_core_events ORDER BY session_id, sequence",
            "DROP TABLE agentos_core_events",
            "ALTER TABLE agentos_core_events_v2 RENAME TO agentos_core_events",
        ],
    },
    Migration {
        version: 3,
        statements: &[
            // Deleted sessions are remembered (bounded, oldest first out) so a
            // late permission answer learns its session was deleted rather
            // than that it never existed.
            "CREATE TABLE agentos_core_session_tombstones (
                session_id TEXT PRIMARY KEY CHECK (length(session_id) BETWEEN 1 AND 256),
                deleted_at_ms INTEGER NOT NULL
            ) STRICT",
            "CREATE INDEX agentos_core_session_tombstones_by_age
                ON agentos_core_session_tombstones (deleted_at_ms, session_id)",
        ],
    },
    // 4: the signed control plane. Per-account collections are small and
    // indexed by account, so their limits are checked with a `COUNT(` over
    // that index inside the writing statement. No foreign keys: rows are
    // removed explicitly in the deleting transaction, and a later
    // migration that rebuilds a parent table cannot cascade into them.
    Migration {
        version: 4,
        statements: &[
            "CREATE TABLE agentos_core_accounts (
                account_id TEXT PRIMARY KEY CHECK (length(account_id) BETWEEN 1 AND 256),
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= created_at_ms)
            ) STRICT",
            // A row with `revoked_at_ms` set refuses its signer until the
            // account authorizes it again; a signer revoked before it was
            // ever stored keeps a row without a role.
            "CREATE TABLE agentos_core_signers (
                account_id TEXT NOT NULL CHECK (length(account_id) BETWEEN 1 AND 256),
                signer TEXT NOT NULL CHECK (length(signer) BETWEEN 1 AND 256),
                role TEXT
                    CHECK (role IS NULL OR role = 'owner' OR role = 'agent' OR role = 'writer'),
                capability_cid TEXT
                    CHECK (capability_cid IS NULL OR length(capability_cid) BETWEEN 1 AND 256),
                capability_blob BLOB
                    CHECK (capability_blob IS NULL OR length(capability_blob) <= 65536),
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= created_at_ms),
                revoked_at_ms INTEGER,
                PRIMARY KEY (account_id, signer),
                CHECK (role IS NOT NULL OR revoked_at_ms IS NOT NULL),
                CHECK ((capability_cid IS NULL) = (capability_blob IS NULL))
            ) STRICT",
            "CREATE INDEX agentos_core_signers_by_capability
                ON agentos_core_signers (capability_cid) WHERE capability_cid IS NOT NULL",
            "CREATE TABLE agentos_core_agents (
                agent_id TEXT PRIMARY KEY CHECK (length(agent_id) BETWEEN 1 AND 64),
                account_id TEXT NOT NULL CHECK (length(account_id) BETWEEN 1 AND 256),
                definition BLOB NOT NULL,
                name TEXT NOT NULL CHECK (length(CAST(name AS BLOB)) <= 1024),
                adapter TEXT NOT NULL CHECK (length(CAST(adapter AS BLOB)) BETWEEN 1 AND 256),
                status TEXT NOT NULL DEFAULT 'idle'
                    CHECK (status = 'idle' OR status = 'running' OR status = 'stopped'
                           OR status = 'error'),
                public_read INTEGER NOT NULL DEFAULT 0 CHECK (public_read = 0 OR public_read = 1),
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= created_at_ms)
            ) STRICT",
            "CREATE INDEX agentos_core_agents_by_account
                ON agentos_core_agents (account_id, created_at_ms, agent_id)",
            "CREATE TABLE agentos_core_agent_collaborators (
                agent_id TEXT NOT NULL,
                account_id TEXT NOT NULL CHECK (length(account_id) BETWEEN 1 AND 256),
                role TEXT NOT NULL CHECK (role = 'reader' OR role = 'writer'),
                status TEXT NOT NULL CHECK (status = 'pending' OR status = 'accepted'),
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= created_at_ms),
                accepted_at_ms INTEGER,
                PRIMARY KEY (agent_id, account_id),
                CHECK ((status = 'accepted') = (accepted_at_ms IS NOT NULL))
            ) STRICT",
            "CREATE INDEX agentos_core_agent_collaborators_by_account
                ON agentos_core_agent_collaborators (account_id, status, agent_id)",
            // The session rows themselves belong to the sessions service;
            // this is only which Seed agent (and owner) a session serves.
            "CREATE TABLE agentos_core_agent_sessions (
                session_id TEXT PRIMARY KEY CHECK (length(session_id) BETWEEN 1 AND 256),
                agent_id TEXT NOT NULL,
                account_id TEXT NOT NULL CHECK (length(account_id) BETWEEN 1 AND 256),
                created_at_ms INTEGER NOT NULL
            ) STRICT",
            "CREATE INDEX agentos_core_agent_sessions_by_agent
                ON agentos_core_agent_sessions (agent_id, session_id)",
            "CREATE INDEX agentos_core_agent_sessions_by_account
                ON agentos_core_agent_sessions (account_id, session_id)",
            "CREATE TABLE agentos_core_model_providers (
                provider_id TEXT PRIMARY KEY CHECK (length(provider_id) BETWEEN 1 AND 64),
                account_id TEXT NOT NULL CHECK (length(account_id) BETWEEN 1 AND 256),
                name TEXT NOT NULL CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 256),
                type TEXT NOT NULL CHECK (length(CAST(type AS BLOB)) BETWEEN 1 AND 64),
                config BLOB NOT NULL,
                auth_mode TEXT
                    CHECK (auth_mode IS NULL OR auth_mode = 'api-key'
                           OR auth_mode = 'subscription'),
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= created_at_ms),
                UNIQUE (account_id, name)
            ) STRICT",
            // The secret names a provider's (opaque) config refers to, so a
            // deleted provider takes exactly the secrets no other one uses.
            "CREATE TABLE agentos_core_provider_secret_refs (
                provider_id TEXT NOT NULL,
                account_id TEXT NOT NULL,
                secret_name TEXT NOT NULL
                    CHECK (length(CAST(secret_name AS BLOB)) BETWEEN 1 AND 256),
                PRIMARY KEY (provider_id, secret_name)
            ) STRICT",
            "CREATE INDEX agentos_core_provider_secret_refs_by_secret
                ON agentos_core_provider_secret_refs (account_id, secret_name)",
            // `ciphertext` is nonce (12 bytes) ‖ AES-256-GCM ciphertext and
            // tag (16 bytes); `key_id` names the key that sealed it.
            "CREATE TABLE agentos_core_secrets (
                secret_id TEXT PRIMARY KEY CHECK (length(secret_id) BETWEEN 1 AND 64),
                account_id TEXT NOT NULL CHECK (length(account_id) BETWEEN 1 AND 256),
                name TEXT NOT NULL CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 256),
                key_id TEXT NOT NULL CHECK (length(key_id) BETWEEN 1 AND 64),
                ciphertext BLOB NOT NULL CHECK (length(ciphertext) >= 28),
                metadata BLOB,
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= created_at_ms),
                UNIQUE (account_id, name)
            ) STRICT",
            // `record_id` orders the records by age (it only grows, and
            // survives VACUUM as an INTEGER PRIMARY KEY), so pruning the
            // oldest beyond the bound is one range delete.
            "CREATE TABLE agentos_core_action_idempotency (
                record_id INTEGER PRIMARY KEY,
                account_id TEXT NOT NULL CHECK (length(account_id) BETWEEN 1 AND 256),
                action TEXT NOT NULL CHECK (length(action) BETWEEN 1 AND 64),
                client_id TEXT NOT NULL CHECK (length(CAST(client_id AS BLOB)) BETWEEN 1 AND 256),
                request_hash BLOB NOT NULL CHECK (length(request_hash) BETWEEN 1 AND 64),
                response BLOB NOT NULL,
                created_at_ms INTEGER NOT NULL,
                UNIQUE (account_id, action, client_id)
            ) STRICT",
        ],
    },
    // 5: an agent's tool documents (its `~/tools`), and where a session's
    // title came from, so a title a user typed is never overwritten by the
    // agent. A tool document is canonical DAG-CBOR named by its CID; the
    // builtins are written lazily the first time an agent's tools are
    // listed, and rewritten only when the registry's CID changes.
    Migration {
        version: 5,
        statements: &[
            "CREATE TABLE agentos_core_tool_documents (
                account_id TEXT NOT NULL CHECK (length(account_id) BETWEEN 1 AND 256),
                agent_id TEXT NOT NULL CHECK (length(agent_id) BETWEEN 1 AND 64),
                name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
                kind TEXT NOT NULL CHECK (kind = 'builtin' OR kind = 'lambda'),
                cid TEXT NOT NULL CHECK (length(cid) BETWEEN 1 AND 256),
                document BLOB NOT NULL CHECK (length(document) >= 1),
                enabled INTEGER NOT NULL DEFAULT 1 CHECK (enabled = 0 OR enabled = 1),
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= created_at_ms),
                PRIMARY KEY (agent_id, name)
            ) STRICT",
            // No other index: every read and the per-agent limit's count
            // are by agent, which the primary key serves (an agent has at
            // most `maxToolsPerAgent` lambdas and a few builtins).
            "ALTER TABLE agentos_core_sessions ADD COLUMN title_source TEXT NOT NULL DEFAULT 'none'
                CHECK (title_source = 'none' OR title_source = 'user' OR title_source = 'agent')",
            // What the agent says the session is doing (its `status`).
            "ALTER TABLE agentos_core_sessions ADD COLUMN description TEXT
                CHECK (description IS NULL OR length(CAST(description AS BLOB)) <= 4096)",
        ],
    },
    // 6: runs. Every execution (a prompt turn from either door, a delegated
    // child, a script) is a row of one tree, and the table is the queue:
    // claiming is one statement over the queued rows, a lease says which
    // process works a row until when, and a waiting row holds no slot. A
    // script's effects are journaled under their content key; a run waiting
    // on an event has one wait row per wait. `journal_seq` and
    // `journal_bytes` count the journal on the run's row, so an append checks
    // the caps without counting. A session's plan lives on its row.
    Migration {
        version: 6,
        statements: &[
            "CREATE TABLE agentos_core_runs (
                run_id TEXT PRIMARY KEY CHECK (length(run_id) BETWEEN 1 AND 64),
                account_id TEXT CHECK (account_id IS NULL OR length(account_id) BETWEEN 1 AND 256),
                root_run_id TEXT NOT NULL CHECK (length(root_run_id) BETWEEN 1 AND 64),
                parent_run_id TEXT CHECK (parent_run_id IS NULL OR length(parent_run_id) BETWEEN 1 AND 64),
                parent_tool_call_id TEXT
                    CHECK (parent_tool_call_id IS NULL OR length(CAST(parent_tool_call_id AS BLOB)) BETWEEN 1 AND 256),
                continued_from_run_id TEXT,
                depth INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0),
                kind TEXT NOT NULL CHECK (kind = 'agent' OR kind = 'script'),
                agent_id TEXT CHECK (agent_id IS NULL OR length(agent_id) BETWEEN 1 AND 256),
                session_id TEXT CHECK (session_id IS NULL OR length(session_id) BETWEEN 1 AND 256),
                origin TEXT NOT NULL CHECK (origin = 'user' OR origin = 'trigger' OR origin = 'agent'
                    OR origin = 'workflow' OR origin = 'system'),
                title TEXT CHECK (title IS NULL OR length(CAST(title AS BLOB)) <= 1024),
                queue TEXT NOT NULL CHECK (queue = 'interactive' OR queue = 'background'),
                status TEXT NOT NULL CHECK (status = 'queued' OR status = 'claimed' OR status = 'running'
                    OR status = 'waiting' OR status = 'succeeded' OR status = 'failed'
                    OR status = 'canceled'),
                attempt INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
                max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),
                not_before_ms INTEGER NOT NULL DEFAULT 0,
                lease_owner TEXT,
                lease_expires_at_ms INTEGER,
                cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested = 0 OR cancel_requested = 1),
                idempotency_key TEXT
                    CHECK (idempotency_key IS NULL OR length(CAST(idempotency_key AS BLOB)) BETWEEN 1 AND 256),
                input_json TEXT NOT NULL CHECK (json_valid(input_json)),
                output_json TEXT CHECK (output_json IS NULL OR json_valid(output_json)),
                error_json TEXT CHECK (error_json IS NULL OR json_valid(error_json)),
                wait_json TEXT CHECK (wait_json IS NULL OR json_valid(wait_json)),
                usage_json TEXT CHECK (usage_json IS NULL OR json_valid(usage_json)),
                budget_json TEXT CHECK (budget_json IS NULL OR json_valid(budget_json)),
                plan_json TEXT CHECK (plan_json IS NULL OR json_valid(plan_json)),
                obligations_json TEXT CHECK (obligations_json IS NULL OR json_valid(obligations_json)),
                source_text TEXT,
                source_cid TEXT,
                plan_step_id TEXT,
                step_label TEXT,
                child_count INTEGER NOT NULL DEFAULT 0 CHECK (child_count >= 0),
                -- A child its parent waits for, and whether its result has
                -- reached the parent (at most once).
                parent_awaits INTEGER NOT NULL DEFAULT 0 CHECK (parent_awaits = 0 OR parent_awaits = 1),
                resolved INTEGER NOT NULL DEFAULT 0 CHECK (resolved = 0 OR resolved = 1),
                journal_seq INTEGER NOT NULL DEFAULT 0 CHECK (journal_seq >= 0),
                journal_bytes INTEGER NOT NULL DEFAULT 0 CHECK (journal_bytes >= 0),
                created_at_ms INTEGER NOT NULL,
                started_at_ms INTEGER,
                finished_at_ms INTEGER,
                updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= created_at_ms),
                CHECK ((status = 'claimed' OR status = 'running')
                       = (lease_owner IS NOT NULL AND lease_expires_at_ms IS NOT NULL)),
                CHECK ((status = 'waiting') = (wait_json IS NOT NULL)),
                CHECK ((status = 'succeeded' OR status = 'failed' OR status = 'canceled')
                       = (finished_at_ms IS NOT NULL)),
                CHECK (kind = 'script' OR session_id IS NOT NULL),
                UNIQUE (session_id, idempotency_key)
            ) STRICT",
            // The claim walks queued rows interactive first ('interactive'
            // sorts after 'background'), then by age.
            "CREATE INDEX agentos_core_runs_dispatch
                ON agentos_core_runs (queue DESC, created_at_ms, run_id) WHERE status = 'queued'",
            // One live turn per session, as an invariant of the table.
            "CREATE UNIQUE INDEX agentos_core_runs_one_live_turn
                ON agentos_core_runs (session_id)
                WHERE kind = 'agent' AND (status = 'claimed' OR status = 'running')",
            // The live rows: the per-kind caps, lease renewal and lapse.
            "CREATE INDEX agentos_core_runs_live
                ON agentos_core_runs (kind, lease_expires_at_ms)
                WHERE status = 'claimed' OR status = 'running'",
            "CREATE INDEX agentos_core_runs_timers
                ON agentos_core_runs (not_before_ms) WHERE status = 'waiting'",
            "CREATE INDEX agentos_core_runs_by_root ON agentos_core_runs (root_run_id, created_at_ms)",
            "CREATE INDEX agentos_core_runs_by_parent ON agentos_core_runs (parent_run_id)
                WHERE parent_run_id IS NOT NULL",
            // Ended children whose result has not reached their parent yet.
            "CREATE INDEX agentos_core_runs_unresolved ON agentos_core_runs (parent_run_id)
                WHERE parent_awaits = 1 AND resolved = 0
                  AND (status = 'succeeded' OR status = 'failed' OR status = 'canceled')",
            "CREATE INDEX agentos_core_runs_by_session ON agentos_core_runs (session_id, created_at_ms)
                WHERE session_id IS NOT NULL",
            "CREATE INDEX agentos_core_runs_by_agent ON agentos_core_runs (agent_id, created_at_ms)
                WHERE agent_id IS NOT NULL",
            "CREATE INDEX agentos_core_runs_terminal_by_age ON agentos_core_runs (finished_at_ms)
                WHERE finished_at_ms IS NOT NULL",
            "CREATE TABLE agentos_core_run_journal (
                run_id TEXT NOT NULL,
                seq INTEGER NOT NULL CHECK (seq >= 1),
                entry_json TEXT NOT NULL CHECK (json_valid(entry_json) AND json_type(entry_json) = 'object'),
                created_at_ms INTEGER NOT NULL,
                PRIMARY KEY (run_id, seq)
            ) STRICT, WITHOUT ROWID",
            // A wait with no signal accepts any signal (a budget pause).
            "CREATE TABLE agentos_core_run_event_waits (
                wait_id TEXT PRIMARY KEY CHECK (length(wait_id) BETWEEN 1 AND 64),
                run_id TEXT NOT NULL,
                signal TEXT CHECK (signal IS NULL OR length(CAST(signal AS BLOB)) BETWEEN 1 AND 256),
                match_json TEXT CHECK (match_json IS NULL OR json_valid(match_json)),
                created_at_ms INTEGER NOT NULL
            ) STRICT",
            "CREATE INDEX agentos_core_run_event_waits_by_run
                ON agentos_core_run_event_waits (run_id, created_at_ms)",
            "ALTER TABLE agentos_core_sessions ADD COLUMN plan_json TEXT
                CHECK (plan_json IS NULL OR json_valid(plan_json))",
            // A delegated child's session names the session and run it
            // works for.
            "ALTER TABLE agentos_core_agent_sessions ADD COLUMN parent_session_id TEXT",
            "ALTER TABLE agentos_core_agent_sessions ADD COLUMN run_id TEXT",
            "CREATE INDEX agentos_core_agent_sessions_by_parent
                ON agentos_core_agent_sessions (parent_session_id) WHERE parent_session_id IS NOT NULL",
        ],
    },
    Migration {
        version: 7,
        statements: &[
            // A typed child's result, as its `return_result` delivered it
            // (checked against the spawner's schema before it lands).
            "ALTER TABLE agentos_core_runs ADD COLUMN result_json TEXT
                CHECK (result_json IS NULL OR json_valid(result_json))",
            // What start-up recovery repairs: the sessions a crash left
            // busy, never every session.
            "CREATE INDEX agentos_core_sessions_busy ON agentos_core_sessions (session_id)
                WHERE state IN ('running', 'waiting')",
            // Retention walks finished trees oldest first, by their roots.
            "CREATE INDEX agentos_core_runs_finished_roots ON agentos_core_runs (finished_at_ms, run_id)
                WHERE parent_run_id IS NULL AND finished_at_ms IS NOT NULL",
        ],
    },
    // Whether a session has turns waiting in the queue: a turn starts at
    // once only when none does, however many finished runs the session has.
    // (Prompt rows' idempotency_key is no longer written: a turn's key lives
    // on its run.)
    Migration {
        version: 8,
        statements: &["CREATE INDEX agentos_core_runs_queued_turns ON agentos_core_runs (session_id)
                WHERE kind = 'agent' AND status = 'queued'"],
    },
    // 9: triggers, and their firings. A firing is unique on its trigger and
    // activity key: claiming it is the insert, in the transaction that also
    // writes what it starts (a session, its words and its queued run), so a
    // key never fires twice and a claimed firing never loses its run. A
    // run a firing started names it, so a chain of triggers can be walked
    // back (the loop guard). Sources, prompts and continuations are the
    // normalized JSON the clients sent.
    Migration {
        version: 9,
        statements: &[
            "CREATE TABLE agentos_core_triggers (
                trigger_id TEXT PRIMARY KEY CHECK (length(trigger_id) BETWEEN 1 AND 64),
                account_id TEXT NOT NULL CHECK (length(account_id) BETWEEN 1 AND 256),
                agent_id TEXT NOT NULL CHECK (length(agent_id) BETWEEN 1 AND 64),
                name TEXT NOT NULL CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 256),
                enabled INTEGER NOT NULL CHECK (enabled = 0 OR enabled = 1),
                source_type TEXT NOT NULL CHECK (length(source_type) BETWEEN 1 AND 64),
                source_json TEXT NOT NULL CHECK (json_valid(source_json)),
                prompt_json TEXT NOT NULL CHECK (json_valid(prompt_json)),
                continuation_json TEXT
                    CHECK (continuation_json IS NULL OR json_valid(continuation_json)),
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL,
                last_checked_at_ms INTEGER,
                last_fired_at_ms INTEGER,
                last_error TEXT
            ) STRICT",
            "CREATE INDEX agentos_core_triggers_by_agent
                ON agentos_core_triggers (agent_id, updated_at_ms DESC)",
            // What the monitor and run finalization walk: enabled triggers
            // of a source type, oldest first.
            "CREATE INDEX agentos_core_triggers_enabled
                ON agentos_core_triggers (source_type, created_at_ms) WHERE enabled = 1",
            "CREATE TABLE agentos_core_trigger_firings (
                firing_id TEXT PRIMARY KEY CHECK (length(firing_id) BETWEEN 1 AND 64),
                account_id TEXT NOT NULL CHECK (length(account_id) BETWEEN 1 AND 256),
                agent_id TEXT NOT NULL,
                trigger_id TEXT NOT NULL,
                activity_key TEXT NOT NULL CHECK (length(CAST(activity_key AS BLOB)) BETWEEN 1 AND 1024),
                session_id TEXT,
                activity_json TEXT NOT NULL CHECK (json_valid(activity_json)),
                status TEXT NOT NULL CHECK (status = 'created' OR status = 'error'
                    OR status = 'delivered' OR status = 'no-listener'),
                error TEXT,
                created_at_ms INTEGER NOT NULL,
                UNIQUE (account_id, trigger_id, activity_key)
            ) STRICT",
            "CREATE INDEX agentos_core_trigger_firings_by_trigger
                ON agentos_core_trigger_firings (trigger_id, created_at_ms DESC)",
            "CREATE INDEX agentos_core_trigger_firings_by_session
                ON agentos_core_trigger_firings (session_id) WHERE session_id IS NOT NULL",
            "ALTER TABLE agentos_core_runs ADD COLUMN trigger_firing_id TEXT",
            "CREATE INDEX agentos_core_runs_by_firing ON agentos_core_runs (trigger_firing_id)
                WHERE trigger_firing_id IS NOT NULL",
        ],
    },
    // 10: the MCP servers accounts configure, with what their last
    // discovery found (the tools as JSON, or why it failed), so a restart
    // lists them without reaching the servers. Header secrets stay in the
    // secrets table; the config names them.
    Migration {
        version: 10,
        statements: &["CREATE TABLE agentos_core_mcp_servers (
                account_id TEXT NOT NULL CHECK (length(account_id) BETWEEN 1 AND 256),
                name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 32),
                server_id TEXT NOT NULL UNIQUE CHECK (length(server_id) BETWEEN 1 AND 64),
                config_json TEXT NOT NULL CHECK (json_valid(config_json)),
                tools_json TEXT CHECK (tools_json IS NULL OR json_valid(tools_json)),
                last_error TEXT,
                discovered_at_ms INTEGER,
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL,
                PRIMARY KEY (account_id, name)
            ) STRICT, WITHOUT ROWID"],
    },
    // 11: where the activity monitor is in each account's hypermedia feed,
    // per server (another server starts cold): the keys of the events last
    // seen, newest first, at most a page of them, and how the last poll
    // went.
    Migration {
        version: 11,
        statements: &["CREATE TABLE agentos_core_activity_watermarks (
                account_id TEXT NOT NULL CHECK (length(account_id) BETWEEN 1 AND 256),
                server_url TEXT NOT NULL CHECK (length(server_url) BETWEEN 1 AND 2048),
                seen_keys_json TEXT NOT NULL
                    CHECK (json_valid(seen_keys_json) AND json_type(seen_keys_json) = 'array'),
                last_poll_at_ms INTEGER,
                last_success_at_ms INTEGER,
                last_error TEXT,
                PRIMARY KEY (account_id, server_url)
            ) STRICT, WITHOUT ROWID"],
    },
    // 12: hypermedia drafts, kept here until an agent publishes them: per
    // owner account and agent, the content as block-node JSON, the
    // metadata as `[key, value]` pairs in the order they were set, where
    // the draft will go, and what publishing it last made.
    Migration {
        version: 12,
        statements: &[
            "CREATE TABLE agentos_core_hm_drafts (
                draft_id TEXT PRIMARY KEY CHECK (length(draft_id) BETWEEN 1 AND 64),
                account_id TEXT NOT NULL CHECK (length(account_id) BETWEEN 1 AND 256),
                agent_id TEXT NOT NULL CHECK (length(agent_id) BETWEEN 1 AND 64),
                title TEXT NOT NULL,
                content_json TEXT NOT NULL
                    CHECK (json_valid(content_json) AND json_type(content_json) = 'array'),
                metadata_json TEXT NOT NULL
                    CHECK (json_valid(metadata_json) AND json_type(metadata_json) = 'array'),
                edit_target TEXT,
                location_target TEXT,
                path_name TEXT,
                visibility TEXT,
                status TEXT NOT NULL CHECK (status IN ('idle', 'published')),
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL,
                published_at_ms INTEGER,
                published_id TEXT,
                published_version TEXT
            ) STRICT",
            "CREATE INDEX agentos_core_hm_drafts_by_agent
                ON agentos_core_hm_drafts (account_id, agent_id, updated_at_ms DESC)",
        ],
    },
    // 13: the event log without a `json_valid` CHECK on its payloads.
    // SQLite checked each payload by converting it to its binary JSON form,
    // a fifth of what appending a row cost (measured: 3.4 → 2.7 µs per row
    // of a 512-row insert). Every payload is valid JSON before it reaches
    // the table (an agent's update passes the decoder's grammar check, the
    // others are rendered by serde) and the store checks it again in debug
    // builds. Same columns, the other rules as they were, rows copied as
    // they are.
    Migration {
        version: 13,
        statements: &[
            "CREATE TABLE agentos_core_events_v13 (
                session_id TEXT NOT NULL,
                sequence INTEGER NOT NULL CHECK (sequence BETWEEN 1 AND 9007199254740991),
                occurred_at_ms INTEGER NOT NULL,
                acp_protocol_version INTEGER NOT NULL CHECK (acp_protocol_version >= 1),
                event_kind TEXT NOT NULL
                    CHECK (event_kind = 'session_update' OR event_kind = 'permission_request'
                           OR event_kind = 'permission_response'),
                correlation_id TEXT
                    CHECK (correlation_id IS NULL OR length(correlation_id) BETWEEN 1 AND 256),
                payload_json TEXT NOT NULL,
                payload_bytes INTEGER NOT NULL
                    CHECK (payload_bytes = length(CAST(payload_json AS BLOB))),
                outcome_status TEXT
                    CHECK (outcome_status IS NULL OR outcome_status = 'accepted'
                           OR outcome_status = 'not_pending'),
                terminal_reason TEXT
                    CHECK (terminal_reason IS NULL OR terminal_reason = 'already_resolved'
                           OR terminal_reason = 'prompt_cancelled'
                           OR terminal_reason = 'adapter_exited'
                           OR terminal_reason = 'session_deleted'
                           OR terminal_reason = 'vm_shutdown'),
                actor_kind TEXT NOT NULL
                    CHECK (actor_kind = 'user' OR actor_kind = 'agent' OR actor_kind = 'system'),
                actor_account TEXT
                    CHECK (actor_account IS NULL OR length(actor_account) BETWEEN 1 AND 256),
                actor_signer TEXT
                    CHECK (actor_signer IS NULL OR length(actor_signer) BETWEEN 1 AND 256),
                PRIMARY KEY (session_id, sequence),
                CHECK (event_kind <> 'session_update'
                       OR (correlation_id IS NULL AND outcome_status IS NULL
                           AND terminal_reason IS NULL)),
                CHECK (event_kind <> 'permission_request'
                       OR (correlation_id IS NOT NULL AND outcome_status IS NULL
                           AND terminal_reason IS NULL)),
                CHECK (event_kind <> 'permission_response'
                       OR (correlation_id IS NOT NULL
                           AND ((outcome_status = 'accepted' AND terminal_reason IS NULL)
                                OR (outcome_status = 'not_pending'
                                    AND terminal_reason IS NOT NULL)))),
                CHECK (actor_kind = 'user' OR (actor_account IS NULL AND actor_signer IS NULL)),
                CHECK (actor_signer IS NULL OR actor_account IS NOT NULL)
            ) STRICT",
            "INSERT INTO agentos_core_events_v13 (session_id, sequence, occurred_at_ms,
                acp_protocol_version, event_kind, correlation_id, payload_json, payload_bytes,
                outcome_status, terminal_reason, actor_kind, actor_account, actor_signer)
             SELECT session_id, sequence, occurred_at_ms, acp_protocol_version, event_kind,
                correlation_id, payload_json, payload_bytes, outcome_status, terminal_reason,
                actor_kind, actor_account, actor_signer
             FROM agentos_core_events ORDER BY session_id, sequence",
            "DROP TABLE agentos_core_events",
            "ALTER TABLE agentos_core_events_v13 RENAME TO agentos_core_events",
        ],
    },
    // 14: no index of every prompt by its state. Its one reader, start-up's
    // search for accepted prompts, is answered by the index of active
    // prompts (`prompts_one_active`, the same rows); every turn wrote it
    // twice, as its prompt was accepted and as it ended.
    Migration {
        version: 14,
        statements: &["DROP INDEX agentos_core_prompts_by_state"],
    },
];
