//! Durable ACP sessions: the store, the turn engine, permissions and restoration.
