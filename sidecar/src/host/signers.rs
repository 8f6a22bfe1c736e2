//! `signers/authorize`, `signers/revoke`, `signers/list`: the operator's way
//! to manage which keys act for an account on the signed API, the same rows
//! the account's own `AuthorizeSigner`/`RevokeSigner` write. A revoked key
//! is refused from its next request, and every `/agents/ws` socket it
//! signed on is closed.

use agentos_protocol::host::{AccountParams, ErrorObject, SignerEntry, SignerParams, SignersList};
use serde_json::value::RawValue;

use super::codec::reply;
use crate::control::{Control, ControlError, SignerRecord, SignerRole};
use crate::http::ws::Sockets;

fn role_name(role: SignerRole) -> &'static str {
    match role {
        SignerRole::Owner => "OWNER",
        SignerRole::Agent => "AGENT",
        SignerRole::Writer => "WRITER",
    }
}

fn entry(record: SignerRecord) -> SignerEntry {
    SignerEntry {
        account: record.account_id,
        signer: record.signer,
        role: record.role.map(|r| role_name(r).to_owned()),
        capability: record.capability_cid,
        created_at_ms: record.created_at_ms,
        revoked_at_ms: record.revoked_at_ms,
    }
}

fn error(e: ControlError) -> ErrorObject {
    super::render::control_error_object(&e)
}

pub(super) async fn authorize(
    control: &Control,
    p: SignerParams,
) -> Result<Box<RawValue>, ErrorObject> {
    let role = match p.role.as_deref() {
        Some("AGENT") => SignerRole::Agent,
        Some("WRITER") => SignerRole::Writer,
        other => {
            return Err(ErrorObject::invalid_params(format!(
                "role must be AGENT or WRITER, not {other:?}"
            )))
        }
    };
    let record = control
        .authorize_signer(&p.account, &p.signer, role)
        .await
        .map_err(error)?;
    reply(&entry(record))
}

pub(super) async fn revoke(
    control: &Control,
    sockets: &Sockets,
    p: SignerParams,
) -> Result<Box<RawValue>, ErrorObject> {
    if p.role.is_some() {
        return Err(ErrorObject::invalid_params("revoke takes no role"));
    }
    let record = control
        .revoke_signer(&p.account, &p.signer)
        .await
        .map_err(error)?;
    sockets.close_signer(&p.account, &p.signer);
    reply(&entry(record))
}

pub(super) async fn list(
    control: &Control,
    p: AccountParams,
) -> Result<Box<RawValue>, ErrorObject> {
    let signers = control.list_signers(&p.account).await.map_err(error)?;
    reply(&SignersList {
        signers: signers.into_iter().map(entry).collect(),
    })
}
