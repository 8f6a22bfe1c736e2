//! The closed vocabularies of the Seed control plane: roles and statuses
//! that travel as fixed strings in actions, responses and events.

use std::fmt;

use ipld_core::ipld::Ipld;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::action::fields::{wrong_type, FromField};
use super::SeedError;

/// Declares a closed string vocabulary: the enum, its wire text, and the
/// readers and writers for actions (strict, naming the field) and serde.
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The wire text.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value for its wire text.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }

            fn expected() -> String {
                let texts: Vec<String> = Self::ALL.iter().map(|v| format!("\"{}\"", v.as_str())).collect();
                format!("one of {}", texts.join(", "))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromField for $name {
            fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
                match &value {
                    Ipld::String(text) => $name::parse(text),
                    _ => None,
                }
                .ok_or_else(|| wrong_type(path, &$name::expected()))
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                $name::parse(&text).ok_or_else(|| {
                    serde::de::Error::custom(format!("`{text}` is not {}", $name::expected()))
                })
            }
        }
    };
}

string_enum! {
    /// What an invited collaborator may do with an agent.
    CollaboratorRole {
        Reader => "reader",
        Writer => "writer",
    }
}

string_enum! {
    /// What the requesting account may do with an agent: the owner, a
    /// collaborator, or (`chatter`) a public reader allowed to chat.
    AccessRole {
        Owner => "owner",
        Writer => "writer",
        Reader => "reader",
        Chatter => "chatter",
    }
}

string_enum! {
    /// Whether a collaborator accepted the invitation.
    CollaboratorStatus {
        Accepted => "accepted",
        Pending => "pending",
    }
}

string_enum! {
    /// An agent's status.
    AgentStatus {
        Idle => "idle",
        Running => "running",
        Stopped => "stopped",
        Error => "error",
    }
}

string_enum! {
    /// A session's status: `streaming` while any turn is live.
    SessionStatus {
        Idle => "idle",
        Streaming => "streaming",
        Stopped => "stopped",
        Error => "error",
    }
}

string_enum! {
    /// How requests to a model provider authenticate; absent means `api-key`.
    AuthMode {
        ApiKey => "api-key",
        Subscription => "subscription",
    }
}

string_enum! {
    /// Whether a subscription provider's sign-in can be used: `needs-login`
    /// when its credentials are missing or were refused on refresh.
    AuthStatus {
        Ok => "ok",
        NeedsLogin => "needs-login",
    }
}

string_enum! {
    /// Where a subscription sign-in stands.
    OAuthLoginStatus {
        Pending => "pending",
        Completed => "completed",
        Failed => "failed",
    }
}

string_enum! {
    /// What a tool document is: a binding to code the server ships
    /// (`builtin`), or a tool an agent or its owner authored (`lambda`).
    ToolKind {
        Builtin => "builtin",
        Lambda => "lambda",
        Mcp => "mcp",
    }
}

string_enum! {
    /// The verbs a user may run on a session's log (`InvokeSessionTool`).
    ToolVerb {
        Read => "read",
        Write => "write",
        Call => "call",
    }
}

string_enum! {
    /// What an entry of an agent's memory is.
    MemoryEntryType {
        File => "file",
        Dir => "dir",
    }
}

string_enum! {
    /// How a memory file's content travels: `utf8` in `content`, `binary`
    /// in `data`.
    MemoryEncoding {
        Utf8 => "utf8",
        Binary => "binary",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_texts_round_trip() {
        for role in AccessRole::ALL {
            assert_eq!(AccessRole::parse(role.as_str()), Some(*role));
            let json = serde_json::to_string(role).unwrap();
            assert_eq!(serde_json::from_str::<AccessRole>(&json).unwrap(), *role);
        }
        assert_eq!(AuthMode::ApiKey.as_str(), "api-key");
        assert!(serde_json::from_str::<SessionStatus>("\"busy\"").is_err());
    }

    #[test]
    fn a_wrong_value_names_the_field_and_the_choices() {
        let error = CollaboratorRole::from_field(Ipld::String("owner".into()), "role").unwrap_err();
        assert_eq!(error.code(), "bad_request");
        assert_eq!(
            error.to_string(),
            "`role` must be one of \"reader\", \"writer\""
        );
    }
}
