//! The configuration's tests: both database descriptors, defaults in
//! camelCase, and every refusal (relative, empty or NUL paths, unknown
//! fields, bad limits and sandbox settings) naming its field.

use super::*;

#[test]
fn accepts_both_descriptors() {
    for kind in ["sqlite_file", "actor_uds"] {
        let text = format!(r#"{{"database":{{"type":"{kind}","path":"/tmp/x"}}}}"#);
        let config = Config::from_json(&text).expect("valid");
        assert_eq!(config.database.type_name(), kind);
    }
}

#[test]
fn relative_path_names_the_field() {
    let err =
        Config::from_json(r#"{"database":{"type":"sqlite_file","path":"rel/x"}}"#).unwrap_err();
    assert_eq!(err.to_string(), "database.path: must be absolute");
}

#[test]
fn a_relative_agent_command_names_the_field() {
    let config = |command: &str| {
        format!(
            r#"{{"database":{{"type":"sqlite_file","path":"/tmp/x"}},
                "agents":{{"echo":{{"command":"{command}"}}}}}}"#
        )
    };
    let err = Config::from_json(&config("target/release/agent"))
        .and_then(|c| c.validate().map(|()| c))
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("agents.echo.command: must be an absolute path"),
        "{err}"
    );
    for ok in ["/usr/bin/node", "node"] {
        let c = Config::from_json(&config(ok)).expect("parses");
        c.validate().expect(ok);
    }
}

#[test]
fn empty_and_nul_paths_are_rejected() {
    let err = Config::from_json(r#"{"database":{"type":"sqlite_file","path":""}}"#).unwrap_err();
    assert_eq!(err.to_string(), "database.path: must not be empty");
    let err =
        Config::from_json(r#"{"database":{"type":"sqlite_file","path":"/a\u0000b"}}"#).unwrap_err();
    assert_eq!(err.to_string(), "database.path: must not contain NUL");
}

#[test]
fn unknown_fields_are_rejected() {
    let err = Config::from_json(r#"{"database":{"type":"actor_uds","path":"/s","token":"t"}}"#)
        .unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
    let err =
        Config::from_json(r#"{"database":{"type":"sqlite_file","path":"/s"},"x":1}"#).unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
    let err = Config::from_json(r#"{"database":{"type":"postgres","path":"/s"}}"#).unwrap_err();
    assert!(err.to_string().contains("unknown variant"), "{err}");
}

#[test]
fn limits_are_camel_case_with_defaults() {
    let config = Config::from_json(
        r#"{"database":{"type":"sqlite_file","path":"/x"},
            "limits":{"acp":{"maxPromptBlocks":7},"sqlite":{"maxResultBytes":10}}}"#,
    )
    .expect("valid");
    assert_eq!(config.limits.acp.max_prompt_blocks, 7);
    assert_eq!(config.limits.acp.max_prompt_bytes, 64 * MIB);
    assert_eq!(config.limits.sqlite.max_result_bytes, 10);
    assert_eq!(config.limits.host.max_frame_bytes, 80 * MIB);
    assert_eq!(config.limits.fs.chunk_bytes, 512 * 1024);
}

#[test]
fn memory_bounds_have_defaults_and_name_their_field() {
    let config =
        Config::from_json(r#"{"database":{"type":"sqlite_file","path":"/x"}}"#).expect("valid");
    assert_eq!(
        config.limits.host.max_queued_bytes_per_connection,
        128 * MIB
    );
    assert_eq!(config.limits.acp.max_queued_stdin_bytes, 64 * MIB);
    assert_eq!(
        config.limits.sqlite.max_socket_frame_bytes,
        256 * MIB as u32
    );
    for (section, field) in [
        ("host", "maxQueuedBytesPerConnection"),
        ("host", "stalledWriteTimeoutMs"),
        ("host", "maxSubscriptionsPerConnection"),
        ("acp", "maxQueuedStdinBytes"),
        ("acp", "stalledStdinTimeoutMs"),
        ("acp", "maxReadTextFileBytes"),
        ("acp", "maxStderrBytesPerSecond"),
        ("sqlite", "maxSocketFrameBytes"),
    ] {
        let text = format!(
            r#"{{"database":{{"type":"sqlite_file","path":"/x"}},"limits":{{"{section}":{{"{field}":0}}}}}}"#
        );
        let err = Config::from_json(&text).unwrap_err();
        assert_eq!(err.field, format!("limits.{section}.{field}"));
    }
}

#[test]
fn fs_limits_are_validated_by_name() {
    let config = Config::from_json(
        r#"{"database":{"type":"sqlite_file","path":"/x"},
            "limits":{"fs":{"chunkBytes":4096,"inlineThresholdBytes":1024}}}"#,
    )
    .expect("valid");
    assert_eq!(config.limits.fs.chunk_bytes, 4096);
    assert_eq!(config.limits.fs.max_inodes, 1_000_000);
    let err = Config::from_json(
        r#"{"database":{"type":"sqlite_file","path":"/x"},
            "limits":{"fs":{"chunkBytes":0}}}"#,
    )
    .unwrap_err();
    assert_eq!(err.field, "limits.fs.chunkBytes");
    let err = Config::from_json(
        r#"{"database":{"type":"sqlite_file","path":"/x"},
            "limits":{"fs":{"chunkBytes":1024,"inlineThresholdBytes":2048}}}"#,
    )
    .unwrap_err();
    assert_eq!(err.field, "limits.fs.inlineThresholdBytes");
    let err = Config::from_json(
        r#"{"database":{"type":"sqlite_file","path":"/x"},"limits":{"fs":{"maxInode":1}}}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
    let limits = FsLimits {
        chunk_bytes: 512,
        inline_threshold_bytes: 1024,
        ..FsLimits::default()
    };
    let err = limits.validated().unwrap_err();
    assert_eq!(err.code(), "invalid_config");
    assert_eq!(err.field, "limits.fs.inlineThresholdBytes");
}

#[test]
fn sandbox_settings_are_strict_and_named() {
    let config = Config::from_json(
        r#"{"database":{"type":"sqlite_file","path":"/data/vm.sqlite"},
            "allowedUids":[1000],
            "agents":{"a":{"command":"/bin/a","sandbox":{"readPaths":["/opt/a"]}}}}"#,
    )
    .expect("valid");
    assert_eq!(config.allowed_uids, Some(vec![1000]));
    assert!(config.agents["a"].sandbox.enabled);
    assert_eq!(config.sessions_dir(), PathBuf::from("/data/sessions"));
    let on_actor = Config::from_json(
        r#"{"database":{"type":"actor_uds","path":"/run/rivet/a1.sock"},"socket":"/run/vm/h.sock"}"#,
    )
    .expect("an actor_uds config");
    assert_eq!(
        on_actor.sessions_dir(),
        PathBuf::from("/run/rivet/a1.sock.sessions"),
        "one directory per actor socket, never a shared sessions/"
    );
    let err = Config::from_json(
        r#"{"database":{"type":"sqlite_file","path":"/x"},
            "agents":{"a":{"command":"/bin/a","sandbox":{"readPaths":["rel"]}}}}"#,
    )
    .unwrap_err();
    assert_eq!(err.field, "agents.a.sandbox.readPaths[0]");
    let err = Config::from_json(
        r#"{"database":{"type":"sqlite_file","path":"/x"},
            "agents":{"a":{"command":"/bin/a","sandbox":{"off":true}}}}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
    let err =
        Config::from_json(r#"{"database":{"type":"sqlite_file","path":"/x"},"allowedUids":[]}"#)
            .unwrap_err();
    assert_eq!(err.field, "allowedUids");
    let err =
        Config::from_json(r#"{"database":{"type":"sqlite_file","path":"/x"},"sessionsDir":"s"}"#)
            .unwrap_err();
    assert_eq!(err.field, "sessionsDir");
}

#[test]
fn filesystem_paths_are_validated_by_name() {
    let config = Config::from_json(
        r#"{"database":{"type":"sqlite_file","path":"/x"},
            "filesystem":{"roots":["/home"],"readOnly":["/home/ro"]}}"#,
    )
    .expect("valid");
    assert_eq!(config.filesystem.roots, vec!["/home".to_owned()]);
    assert_eq!(config.filesystem.read_only, vec!["/home/ro".to_owned()]);
    let err = Config::from_json(
        r#"{"database":{"type":"sqlite_file","path":"/x"},
            "filesystem":{"roots":["/", "rel"]}}"#,
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "filesystem.roots[1]: must be absolute");
    let err = Config::from_json(
        r#"{"database":{"type":"sqlite_file","path":"/x"},
            "filesystem":{"roots":["/"],"readOnly":["/a\u0000"]}}"#,
    )
    .unwrap_err();
    assert_eq!(err.field, "filesystem.readOnly[0]");
}
