//! A seccomp filter that keeps a confined adapter off Unix sockets.
//!
//! Landlock, as most kernels offer it, does not govern `connect()` to a
//! Unix socket by path, so an agent running as the sidecar's uid could
//! reach the host socket or the actor runtime's socket even when every
//! file around them is out of reach. This filter makes `socket(AF_UNIX, …)`
//! fail with `EACCES` for the adapter and everything it starts (a seccomp
//! filter is inherited and cannot be removed). Socket pairs stay allowed, so
//! a runtime can still wire up its own child processes, and so do network
//! sockets. A system call made through a foreign ABI (32-bit compatibility
//! calls, the x32 ABI) is refused outright, so the check cannot be stepped
//! around. Installed between fork and exec, after `no_new_privs`.

/// `AUDIT_ARCH_*` of the architecture this binary was built for.
#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: u32 = 0xC000_00B7;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the adapter seccomp filter knows x86_64 and aarch64 only");

/// System call numbers with this bit set are the x32 ABI on x86_64.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Offsets in `struct seccomp_data`: `nr`, `arch`, then `args[0]` (whose
/// low 32 bits hold the address family on a little-endian machine).
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
const OFFSET_ARG0: u32 = 16;

fn program() -> [libc::sock_filter; 9] {
    // Jump offsets count instructions after the current one.
    let ld = |offset: u32| libc::sock_filter {
        code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k: offset,
    };
    let jump = |op: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | op | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let ret = |k: u32| libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let socket = libc::SYS_socket as u32;
    let af_unix = libc::AF_UNIX as u32;
    [
        /* 0 */ ld(OFFSET_ARCH),
        /* 1 */ jump(libc::BPF_JEQ, NATIVE_ARCH, 0, 5), // foreign ABI → 7
        /* 2 */ ld(OFFSET_NR),
        /* 3 */ jump(libc::BPF_JSET, X32_SYSCALL_BIT, 3, 0), // x32 → 7
        /* 4 */ jump(libc::BPF_JEQ, socket, 0, 3), // not socket() → 8
        /* 5 */ ld(OFFSET_ARG0),
        /* 6 */ jump(libc::BPF_JEQ, af_unix, 0, 1), // not AF_UNIX → 8
        /* 7 */ ret(libc::SECCOMP_RET_ERRNO | libc::EACCES as u32),
        /* 8 */ ret(libc::SECCOMP_RET_ALLOW),
    ]
}

/// Installs the filter on the calling thread (and so on everything it
/// executes). `no_new_privs` must already be set.
///
/// Only async-signal-safe calls: it runs in the forked child before exec.
pub(crate) fn deny_unix_sockets() -> std::io::Result<()> {
    let filter = program();
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `filter`, which outlives the call; the kernel
    // copies the program.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &prog as *const libc::sock_fprog,
            0,
            0,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `probe` in a forked child under the filter and returns what it
    /// reported through its exit code.
    fn in_filtered_child(probe: fn() -> i32) -> i32 {
        // SAFETY: the child only makes system calls and exits.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork");
            if pid == 0 {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                    || deny_unix_sockets().is_err()
                {
                    libc::_exit(90);
                }
                libc::_exit(probe());
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            assert!(libc::WIFEXITED(status), "the child exited normally");
            libc::WEXITSTATUS(status)
        }
    }

    fn errno_of(fd: libc::c_int) -> i32 {
        if fd >= 0 {
            // SAFETY: closing a descriptor we just made.
            unsafe { libc::close(fd) };
            return 0;
        }
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    }

    #[test]
    fn unix_sockets_are_refused_and_the_rest_allowed() {
        fn unix() -> i32 {
            // SAFETY: plain system call.
            errno_of(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) })
        }
        fn inet() -> i32 {
            // SAFETY: plain system call.
            errno_of(unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) })
        }
        fn pair() -> i32 {
            let mut fds = [0; 2];
            // SAFETY: `fds` has room for two descriptors.
            let rc =
                unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) };
            if rc == 0 {
                // SAFETY: closing the pair we just made.
                unsafe {
                    libc::close(fds[0]);
                    libc::close(fds[1]);
                }
                return 0;
            }
            std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
        }
        assert_eq!(in_filtered_child(unix), libc::EACCES);
        assert_eq!(in_filtered_child(inet), 0);
        assert_eq!(in_filtered_child(pair), 0);
        // Without the filter the same call works.
        assert_eq!(unix(), 0);
    }
}
