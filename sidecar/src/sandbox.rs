//! Confinement of adapter processes: agents are programs we did not write,
//! so each gets only what its session needs.
//!
//! Every session's adapter runs in its own directory under the sessions
//! directory (`<sessionsDir>/<escaped session id>/work`, with a private
//! `tmp` beside it named by `TMPDIR`), never in the sidecar's working
//! directory; an operator's MCP command server gets one named `+<hash>` of
//! its server and account, a name no session id escapes to. Where the kernel offers Landlock, the adapter enters a ruleset
//! before it executes: read-only (and executable) on the system directories
//! and on the agent's own installation (the directory of its command and of
//! each absolute path among its arguments, widened to the install root above
//! a `node_modules`), read-write only on its session directory and the
//! registry entry's `sandbox.writePaths`; signals and abstract sockets
//! outside its own processes are out of scope. The data directory, the config
//! and the sockets are not named, so they stay out of reach. The kernel is
//! probed once at start; without Landlock the same directories are used and
//! `vm/status` says confinement is inactive.

use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use agentos_adapters::Confinement;
use agentos_protocol::host::ConfinementInfo;
use landlock::{
    Access, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};
use sha2::{Digest, Sha256};

use crate::config::{AgentSpec, Config};

/// The ABI whose rights the rulesets handle; older kernels get the subset
/// they know (the crate's best-effort mode), newer ones nothing more.
const TARGET_ABI: ABI = ABI::V9;

/// System directories an adapter may read and execute from.
const SYSTEM_READ: [&str; 7] = [
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/sbin",
    "/nix/store",
];

/// What an adapter may read in `/etc`: the loader, names, time and TLS, not
/// the whole directory (a config may live there).
const ETC_READ: [&str; 16] = [
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/services",
    "/etc/alternatives",
];

/// Devices every program expects to open.
const DEVICES_RW: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];
const DEVICES_READ: [&str; 2] = ["/dev/urandom", "/dev/random"];

/// Longest escaped session id used as a directory name; longer ones are
/// named by their hash.
const MAX_ESCAPED: usize = 128;

/// A session id as one safe path component: ASCII letters, digits, `-` and
/// `_` stay, every other byte becomes `%XX`; an id that would escape to more
/// than 128 bytes becomes `~` and its SHA-256 (`~` never survives escaping,
/// so the two forms cannot collide). Never empty, `.` or `..`.
pub fn session_dir_name(session_id: &str) -> String {
    let mut out = String::with_capacity(session_id.len());
    for byte in session_id.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
        if out.len() > MAX_ESCAPED {
            return format!("~{}", hex::encode(Sha256::digest(session_id.as_bytes())));
        }
    }
    if out.is_empty() {
        out.push('~');
    }
    out
}

/// What the kernel offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Support {
    Landlock { abi: u32 },
    Unavailable { reason: String },
}

/// Asks the kernel for its Landlock ABI version
/// (`landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`).
pub fn probe() -> Support {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_long = 1;
    // SAFETY: with a null attribute pointer and size 0 the call only returns
    // the version (or an error); it touches no memory of ours.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if version <= 0 {
        let error = std::io::Error::last_os_error();
        let reason = match error.raw_os_error() {
            Some(libc::ENOSYS) => "the kernel has no Landlock support".to_owned(),
            Some(libc::EOPNOTSUPP) => "Landlock is not enabled at boot".to_owned(),
            _ => format!("probing Landlock failed: {error}"),
        };
        return Support::Unavailable { reason };
    }
    Support::Landlock {
        abi: u32::try_from(version).unwrap_or(0),
    }
}

/// One adapter start, prepared: where it runs and what it may touch.
#[derive(Debug)]
pub struct Launch {
    /// The adapter's working directory.
    pub cwd: PathBuf,
    /// Its private temporary directory (`TMPDIR`).
    pub tmp: PathBuf,
    /// The ruleset it enters, when confinement is active for it.
    pub confinement: Option<Confinement>,
}

/// Starts adapters in their directories and, where possible, confined.
#[derive(Debug)]
pub struct Launcher {
    /// `None`: the adapter runs where the sidecar runs (library tests that
    /// build a service without a VM).
    sessions_dir: Option<PathBuf>,
    support: Support,
    unconfined_agents: Vec<String>,
}

impl Launcher {
    /// No directories and no confinement: what a bare `Sessions` uses.
    pub fn inherit() -> Launcher {
        Launcher {
            sessions_dir: None,
            support: Support::Unavailable {
                reason: "no launcher configured".into(),
            },
            unconfined_agents: Vec::new(),
        }
    }

    /// The VM's launcher: probes the kernel once and logs what it found, and
    /// warns about every agent whose entry turned confinement off.
    pub fn for_config(config: &Config) -> Launcher {
        Self::with_support(config, probe())
    }

    /// Like [`for_config`](Self::for_config) with a given probe result (so
    /// the fallback can be tested on a kernel that has Landlock).
    pub fn with_support(config: &Config, support: Support) -> Launcher {
        if let Support::Unavailable { reason } = &support {
            tracing::warn!(
                %reason,
                "Landlock is not available: adapters run in their own directories, unconfined"
            );
        }
        let unconfined_agents: Vec<String> = config
            .agents
            .iter()
            .filter(|(_, spec)| !spec.sandbox.enabled)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &unconfined_agents {
            tracing::warn!(agent = %id, "agents.{id}.sandbox.enabled is false: this agent runs unconfined");
        }
        Launcher {
            sessions_dir: Some(config.sessions_dir()),
            support,
            unconfined_agents,
        }
    }

    pub fn support(&self) -> &Support {
        &self.support
    }

    /// What `vm/status` says about confinement.
    pub fn info(&self) -> ConfinementInfo {
        let (active, mechanism, abi) = match &self.support {
            Support::Landlock { abi } => (true, "landlock", *abi),
            Support::Unavailable { .. } => (false, "none", 0),
        };
        ConfinementInfo {
            active,
            mechanism: mechanism.to_owned(),
            abi,
            unconfined_agents: self.unconfined_agents.clone(),
        }
    }

    /// Creates the session's directories (mode 0700) and builds the ruleset
    /// for `spec`. `None` when this launcher gives no directories.
    pub fn prepare(&self, session_id: &str, spec: &AgentSpec) -> Result<Option<Launch>, String> {
        self.prepare_in(&session_dir_name(session_id), spec)
    }

    /// [`prepare`](Self::prepare) in the directory `dir_name` of the
    /// sessions directory.
    fn prepare_in(&self, dir_name: &str, spec: &AgentSpec) -> Result<Option<Launch>, String> {
        let Some(base) = &self.sessions_dir else {
            return Ok(None);
        };
        let session_dir = base.join(dir_name);
        let cwd = session_dir.join("work");
        let tmp = session_dir.join("tmp");
        for dir in [base, &session_dir, &cwd, &tmp] {
            private_dir(dir)?;
        }
        let confinement = match (&self.support, spec.sandbox.enabled) {
            (Support::Landlock { .. }, true) => Some(Confinement::from_ruleset(ruleset(
                &read_set(spec),
                &write_set(spec, &session_dir),
            )?)),
            _ => None,
        };
        Ok(Some(Launch {
            cwd,
            tmp,
            confinement,
        }))
    }
}

impl Launcher {
    /// The command that starts `spec` for `session_id` with `env`: in the
    /// session's directories (`TMPDIR` naming its own) and, when active,
    /// under its ruleset.
    pub fn command(
        &self,
        session_id: &str,
        spec: &AgentSpec,
        env: std::collections::BTreeMap<String, String>,
    ) -> Result<agentos_adapters::AdapterCommand, String> {
        self.command_in(&session_dir_name(session_id), spec, env)
    }

    /// [`command`](Self::command) for a process that is no session's (an
    /// operator's MCP server): its directory is named by a hash of `key`
    /// behind a `+`, which no session id escapes to, so no session can
    /// share or remove it.
    pub fn command_for(
        &self,
        key: &str,
        spec: &AgentSpec,
        env: std::collections::BTreeMap<String, String>,
    ) -> Result<agentos_adapters::AdapterCommand, String> {
        let name = format!("+{}", &hex::encode(Sha256::digest(key.as_bytes()))[..32]);
        self.command_in(&name, spec, env)
    }

    fn command_in(
        &self,
        dir_name: &str,
        spec: &AgentSpec,
        env: std::collections::BTreeMap<String, String>,
    ) -> Result<agentos_adapters::AdapterCommand, String> {
        let mut command = agentos_adapters::AdapterCommand {
            program: spec.command.clone(),
            args: spec.args.clone(),
            env,
            cwd: None,
            confinement: None,
        };
        if let Some(launch) = self.prepare_in(dir_name, spec)? {
            command
                .env
                .insert("TMPDIR".into(), launch.tmp.display().to_string());
            command.cwd = Some(launch.cwd);
            command.confinement = launch.confinement;
        }
        Ok(command)
    }

    /// Removes a deleted session's directories and everything its adapter
    /// left there (symbolic links are removed, never followed).
    pub async fn remove(&self, session_id: &str) -> Result<(), String> {
        let Some(base) = &self.sessions_dir else {
            return Ok(());
        };
        let dir = base.join(session_dir_name(session_id));
        tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("{}: {e}", dir.display())),
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

/// Creates `dir` (and its parents) and makes it 0700.
fn private_dir(dir: &Path) -> Result<(), String> {
    agentos_base::private::create_private_dir(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot make {} private: {e}", dir.display()))
}

/// The absolute path `program` runs from: itself when it names a path, else
/// the first executable of that name on `PATH`.
fn resolve_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The installation a path belongs to: the parent of its outermost
/// `node_modules` when it has one (the package and its dependencies), else
/// its directory.
fn install_root(path: &Path) -> PathBuf {
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let mut root = PathBuf::new();
    for component in dir.components() {
        if component == Component::Normal("node_modules".as_ref()) {
            return root;
        }
        root.push(component);
    }
    dir
}

/// Everything the adapter may read and execute.
fn read_set(spec: &AgentSpec) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = SYSTEM_READ
        .iter()
        .chain(ETC_READ.iter())
        .chain(DEVICES_READ.iter())
        .map(PathBuf::from)
        .collect();
    let mut own = Vec::new();
    if let Some(program) = resolve_program(&spec.command) {
        own.push(program);
    }
    own.extend(
        spec.args
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.is_absolute() && p.exists()),
    );
    for path in own {
        paths.push(install_root(&path));
        // Through a symlink too (`/usr/local/bin/x` -> `/opt/x/bin/x`).
        if let Ok(real) = std::fs::canonicalize(&path) {
            paths.push(install_root(&real));
        }
    }
    paths.extend(spec.sandbox.read_paths.iter().cloned());
    paths
}

/// Everything the adapter may also write.
fn write_set(spec: &AgentSpec, session_dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = DEVICES_RW.iter().map(PathBuf::from).collect();
    paths.push(session_dir.to_path_buf());
    paths.extend(spec.sandbox.write_paths.iter().cloned());
    paths
}

/// Builds the Landlock ruleset: `read` gets read and execute, `write`
/// everything. Paths that do not exist are skipped.
fn ruleset(read: &[PathBuf], write: &[PathBuf]) -> Result<OwnedFd, String> {
    let failed = |e: landlock::RulesetError| format!("cannot build the Landlock ruleset: {e}");
    let mut created = Ruleset::default()
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .map_err(failed)?
        .scope(Scope::from_all(TARGET_ABI))
        .map_err(failed)?
        .create()
        .map_err(failed)?;
    let rules = read
        .iter()
        .map(|p| (p, AccessFs::from_read(TARGET_ABI)))
        .chain(write.iter().map(|p| (p, AccessFs::from_all(TARGET_ABI))));
    for (path, access) in rules {
        let Ok(metadata) = std::fs::metadata(path) else {
            continue;
        };
        let Ok(fd) = PathFd::new(path) else {
            continue;
        };
        let access = if metadata.is_dir() {
            access
        } else {
            access & AccessFs::from_file(TARGET_ABI)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(failed)?;
    }
    Option::<OwnedFd>::from(created)
        .ok_or_else(|| "the kernel refused to create a Landlock ruleset".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_dir_names_are_single_safe_components() {
        assert_eq!(session_dir_name("main"), "main");
        assert_eq!(session_dir_name("a/b"), "a%2Fb");
        assert_eq!(session_dir_name(".."), "%2E%2E");
        assert_eq!(session_dir_name("."), "%2E");
        assert_eq!(session_dir_name(""), "~");
        let long = "x/".repeat(100);
        let name = session_dir_name(&long);
        assert!(name.starts_with('~') && name.len() == 65, "{name}");
        assert_ne!(session_dir_name("a b"), session_dir_name("a_b"));
    }

    #[test]
    fn install_root_is_above_node_modules() {
        assert_eq!(
            install_root(Path::new("/opt/x/node_modules/@a/b/dist/agent.js")),
            PathBuf::from("/opt/x")
        );
        assert_eq!(
            install_root(Path::new("/opt/bin/agent-does-not-exist")),
            PathBuf::from("/opt/bin")
        );
    }

    #[test]
    fn the_probe_answers_either_way() {
        match probe() {
            Support::Landlock { abi } => assert!(abi >= 1),
            Support::Unavailable { reason } => assert!(!reason.is_empty()),
        }
    }

    #[test]
    fn without_landlock_the_launcher_gives_directories_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = Config::embedded_default(dir.path(), Path::new("/bin/true"));
        config.sessions_dir = Some(dir.path().join("s"));
        let launcher = Launcher::with_support(
            &config,
            Support::Unavailable {
                reason: "test".into(),
            },
        );
        assert!(!launcher.info().active);
        assert_eq!(launcher.info().mechanism, "none");
        let launch = launcher
            .prepare("a/b", &config.agents["echo"])
            .expect("prepared")
            .expect("directories");
        assert!(launch.confinement.is_none());
        assert_eq!(launch.cwd, dir.path().join("s/a%2Fb/work"));
        let mode = std::fs::metadata(dir.path().join("s/a%2Fb"))
            .expect("session dir")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
