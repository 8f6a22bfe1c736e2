//! The signed API's own error codes: what its envelope, transport and
//! access checks answer in `{_:"Error", code}`, beside the session codes
//! (`crate::ErrorCode`) and the control plane's that it passes on.
//! ARCHITECTURE.md lists every one ("Signed API codes"); a test checks it.

macro_rules! api_codes {
    ($($variant:ident => $text:literal,)*) => {
        /// A stable code of the signed API's own refusals.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ApiCode {
            $($variant,)*
        }

        impl ApiCode {
            pub const ALL: &'static [ApiCode] = &[$(ApiCode::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(ApiCode::$variant => $text,)*
                }
            }
        }
    };
}

api_codes! {
    BadBody => "bad_body",
    BadRequest => "bad_request",
    BodyTimeout => "body_timeout",
    BodyTooLarge => "body_too_large",
    Busy => "busy",
    BadCapability => "bad_capability",
    CapabilityUnknown => "capability_unknown",
    CorruptRow => "corrupt_row",
    DownloadFailed => "download_failed",
    DownloadTooLarge => "download_too_large",
    DownloadsBusy => "downloads_busy",
    Forbidden => "forbidden",
    InvalidArgument => "invalid_argument",
    NotFound => "not_found",
    ProviderNeedsLogin => "provider_needs_login",
    PublishFailed => "publish_failed",
    ProviderRejected => "provider_rejected",
    ProviderUnreachable => "provider_unreachable",
    Replayed => "replayed",
    SignerNotAuthorized => "signer_not_authorized",
    SignerRevoked => "signer_revoked",
    TimestampOutOfWindow => "timestamp_out_of_window",
    UnknownAdapter => "unknown_adapter",
    UnsupportedAction => "unsupported_action",
    UnsupportedField => "unsupported_field",
    UnsupportedMediaType => "unsupported_media_type",
    WebsocketOnly => "websocket_only",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_documented_in_the_architecture() {
        let doc = include_str!("../../../ARCHITECTURE.md");
        let section = doc
            .split("## Signed API codes")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .unwrap_or_default();
        for code in ApiCode::ALL {
            assert!(
                section.contains(&format!("`{}`", code.as_str())),
                "ARCHITECTURE.md \"Signed API codes\" does not list `{}`",
                code.as_str()
            );
        }
    }
}
