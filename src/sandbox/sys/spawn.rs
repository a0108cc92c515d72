//! Starting a command without copying this process's memory: `clone(CLONE_VM | CLONE_VFORK)`
//! on a stack of its own, this thread paused until the child has exec'd (or failed), as
//! glibc's `posix_spawn` does. `fork` (what `std::process::Command` uses once a pre-exec hook
//! is set) copies the page tables of palisade's 20-odd MB, write-protects them, and leaves
//! both processes to take copy-on-write faults until the child's exec unmaps its copy; on
//! `palisade run --backend landlock` that was the largest cost palisade itself could cut
//! (docs/benchmarks.md, issue 15).
//!
//! The child shares this process's memory until it execs, so it may only make system calls on
//! data built here beforehand (`Exec`, the hook's own data): no allocation, no lock, no
//! write to memory but its own stack and the one error slot. It runs with every signal
//! blocked and every caught signal reset to its default (a handler of this process must never
//! run on shared memory), then does what `Command` would: chdir, SIGPIPE to default, the
//! hook, the signal mask asked for, execve (and `/bin/sh FILE` on ENOEXEC, as `execvp`).
//! A failure before exec reaches the parent as the errno the child stored; the child is then
//! reaped here. Never: leave a child unreaped when the spawn fails, or return before the
//! child has exec'd or ended.

use std::collections::BTreeMap;
use std::ffi::{c_void, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

/// The child's stack: far more than its few frames need; the pages it never touches cost
/// nothing. A guard page below it turns an overflow into a fault of the child alone.
const STACK_SIZE: usize = 256 * 1024;
const GUARD: usize = 4096;

/// A command's program, argument vector, environment and working directory as C strings,
/// built before the child starts (it cannot allocate).
#[derive(Debug)]
pub struct Exec {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
}

impl Exec {
    /// `program` (argv[0] too, as `Command` sets it) with `args`, exactly the environment
    /// `env`, started in `cwd`. `None` when `program` is not an absolute path (`execvp`
    /// would search PATH: left to `Command`) or a string holds a NUL byte (`Command` refuses
    /// it with its own error).
    pub fn new(
        program: &Path,
        args: &[String],
        env: &BTreeMap<String, String>,
        cwd: &Path,
    ) -> Option<Exec> {
        if !program.is_absolute() {
            return None;
        }
        let program = CString::new(program.as_os_str().as_bytes()).ok()?;
        let mut argv = vec![program.clone()];
        for a in args {
            argv.push(CString::new(a.as_bytes()).ok()?);
        }
        let mut envp = Vec::with_capacity(env.len());
        for (k, v) in env {
            envp.push(CString::new(format!("{k}={v}")).ok()?);
        }
        Some(Exec {
            program,
            argv,
            envp,
            cwd: CString::new(cwd.as_os_str().as_bytes()).ok()?,
        })
    }
}

/// What the child reads (all built by the parent) and the one slot it writes.
struct Shared<'a> {
    exec: &'a Exec,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    /// `/bin/sh PROGRAM ARGS...`, for a program the kernel cannot execute (ENOEXEC).
    sh_argv: &'a [*const libc::c_char],
    hook: &'a (dyn Fn() -> std::io::Result<()> + Sync),
    mask: &'a libc::sigset_t,
    /// 0, or the errno of the child's failed step.
    err: AtomicI32,
}

/// Starts `exec` with the signal mask `mask`, running `hook` in the child right before the
/// mask is set and the program executed (the hook must be async-signal-safe: it runs in
/// the shared address space). Returns once the child has exec'd, with its pid; a failure in
/// the child (chdir, the hook, execve) is returned as its errno, the child reaped.
pub fn spawn(
    exec: &Exec,
    hook: &(dyn Fn() -> std::io::Result<()> + Sync),
    mask: &libc::sigset_t,
) -> std::io::Result<libc::pid_t> {
    let ptrs = |v: &[CString]| -> Vec<*const libc::c_char> {
        v.iter()
            .map(|c| c.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let argv = ptrs(&exec.argv);
    let envp = ptrs(&exec.envp);
    let mut sh_argv = vec![c"/bin/sh".as_ptr(), exec.program.as_ptr()];
    sh_argv.extend(argv.iter().skip(1));
    let shared = Shared {
        exec,
        argv: &argv,
        envp: &envp,
        sh_argv: &sh_argv,
        hook,
        mask,
        err: AtomicI32::new(0),
    };
    let stack = Stack::new()?;
    // Every signal blocked across the clone: the child starts with them blocked (no handler
    // of this process can run in it) and sets its own mask before exec.
    let all = full_set();
    let mut before = empty_set();
    // SAFETY: both sets are valid sigset_t values owned by this frame.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    // SAFETY: `child` runs on `stack`, a mapping of its own, in this address space; it only
    // reads `shared` (alive in this frame: CLONE_VFORK pauses this thread until the child
    // has exec'd or exited) and writes its atomic slot. SIGCHLD makes it an ordinary child.
    let pid = unsafe {
        libc::clone(
            child,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &shared as *const Shared as *mut c_void,
        )
    };
    let clone_err = std::io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut()) };
    drop(stack);
    if pid < 0 {
        return Err(clone_err);
    }
    match shared.err.load(Ordering::SeqCst) {
        0 => Ok(pid),
        errno => {
            // The child has already exited (the clone returned): reap it.
            let mut status = 0;
            // SAFETY: waitpid on the child just created, writing into a local.
            while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
            }
            Err(std::io::Error::from_raw_os_error(errno))
        }
    }
}

/// The child: runs on its own stack in the parent's memory, every signal blocked.
extern "C" fn child(arg: *mut c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Shared` the parent passed, alive until this child execs or exits.
    let shared = unsafe { &*(arg as *const Shared) };
    let fail = |e: std::io::Error| -> libc::c_int {
        shared
            .err
            .store(e.raw_os_error().unwrap_or(libc::EINVAL), Ordering::SeqCst);
        // SAFETY: ends this child at once (no atexit handlers, no unwinding).
        unsafe { libc::_exit(127) }
    };
    reset_handlers();
    // SAFETY: chdir reads the NUL-terminated path built by the parent.
    if unsafe { libc::chdir(shared.exec.cwd.as_ptr()) } != 0 {
        return fail(std::io::Error::last_os_error());
    }
    if let Err(e) = (shared.hook)() {
        return fail(e);
    }
    // SAFETY: sets this thread's mask from a set the parent built.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, shared.mask, std::ptr::null_mut()) };
    if r != 0 {
        return fail(std::io::Error::from_raw_os_error(r));
    }
    // SAFETY: execve reads NUL-terminated strings and NULL-terminated pointer arrays the
    // parent built and keeps alive; it returns only on failure.
    unsafe {
        libc::execve(
            shared.exec.program.as_ptr(),
            shared.argv.as_ptr(),
            shared.envp.as_ptr(),
        )
    };
    let mut e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENOEXEC) {
        // As execvp: a file the kernel cannot execute is run as a shell script.
        // SAFETY: as above, with the `/bin/sh` vector the parent built.
        unsafe {
            libc::execve(
                c"/bin/sh".as_ptr(),
                shared.sh_argv.as_ptr(),
                shared.envp.as_ptr(),
            )
        };
        e = std::io::Error::last_os_error();
    }
    fail(e)
}

/// Resets every caught signal to its default action in the child (ignored ones stay
/// ignored, as across exec), and SIGPIPE, which palisade ignores, to its default (as
/// `Command` does). The handlers table is the child's own copy (no CLONE_SIGHAND).
fn reset_handlers() {
    // 1 to SIGRTMAX (64 on Linux).
    for sig in 1..=64 {
        // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, empty mask).
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reads the disposition into a local; EINVAL (SIGKILL/SIGSTOP, glibc's own
        // signals) leaves it SIG_DFL and it is skipped.
        unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
        let caught = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
        if caught || sig == libc::SIGPIPE {
            // SAFETY: an all-zero sigaction is SIG_DFL with an empty mask.
            let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: installs the default action from a local; no handler code.
            unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
        }
    }
}

fn empty_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut s: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: initialises the local set.
    unsafe { libc::sigemptyset(&mut s) };
    s
}

fn full_set() -> libc::sigset_t {
    let mut s = empty_set();
    // SAFETY: fills the local set.
    unsafe { libc::sigfillset(&mut s) };
    s
}

/// The child's stack: an anonymous mapping with a guard page at its low end, unmapped on
/// drop (after the child has exec'd: it no longer uses it).
struct Stack {
    base: *mut c_void,
}

impl Stack {
    fn new() -> std::io::Result<Stack> {
        // SAFETY: a fresh anonymous private mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                STACK_SIZE + GUARD,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let stack = Stack { base };
        // SAFETY: the lowest page of the mapping made above, owned by `stack`.
        if unsafe { libc::mprotect(base, GUARD, libc::PROT_NONE) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The initial stack pointer (the stack grows down from the mapping's end).
    fn top(&self) -> *mut c_void {
        self.base.wrapping_byte_add(STACK_SIZE + GUARD)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; nothing refers into it any more.
        unsafe { libc::munmap(self.base, STACK_SIZE + GUARD) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked() -> libc::sigset_t {
        empty_set()
    }

    fn exec(program: &str, args: &[&str], cwd: &Path) -> Exec {
        let env: BTreeMap<String, String> = [("PATH".to_string(), "/usr/bin:/bin".to_string())]
            .into_iter()
            .collect();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Exec::new(Path::new(program), &args, &env, cwd).unwrap()
    }

    fn wait(pid: libc::pid_t) -> i32 {
        let mut status = 0;
        // SAFETY: waits for a child this test spawned.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "{status:#x}");
        libc::WEXITSTATUS(status)
    }

    #[test]
    fn runs_the_program_with_its_arguments_environment_and_directory() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out");
        let script = format!(
            "printf '%s|%s|%s|%s' \"$0\" \"$1\" \"$PATH\" \"$(pwd)\" > {}; exit 7",
            out.display()
        );
        let e = exec("/bin/sh", &["-c", &script, "zero", "one"], d.path());
        let pid = spawn(&e, &|| Ok(()), &blocked()).unwrap();
        assert_eq!(wait(pid), 7);
        let real = std::fs::canonicalize(d.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            format!("zero|one|/usr/bin:/bin|{}", real.display())
        );
    }

    #[test]
    fn a_failing_hook_fails_the_spawn_with_its_errno_and_nothing_runs() {
        let d = tempfile::tempdir().unwrap();
        let marker = d.path().join("ran");
        let e = exec(
            "/bin/sh",
            &["-c", &format!("touch {}", marker.display())],
            d.path(),
        );
        let err = spawn(
            &e,
            &|| Err(std::io::Error::from_raw_os_error(libc::EPERM)),
            &blocked(),
        )
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
        assert!(!marker.exists(), "the command never ran");
    }

    #[test]
    fn a_missing_program_or_directory_is_the_childs_errno() {
        let d = tempfile::tempdir().unwrap();
        let e = exec("/nonexistent/program", &[], d.path());
        let err = spawn(&e, &|| Ok(()), &blocked()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
        let e = exec("/bin/true", &[], &d.path().join("gone"));
        let err = spawn(&e, &|| Ok(()), &blocked()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn a_file_without_a_shebang_runs_under_sh_as_execvp_does() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let script = d.path().join("plain");
        std::fs::write(&script, "exit 5\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = exec(script.to_str().unwrap(), &[], d.path());
        // A child another test forks while the script is still open for writing holds it
        // open (ETXTBSY) until that child execs: the race of every test that writes and runs
        // a file in a multi-threaded process, so it is retried, boundedly.
        let mut tries = 0;
        let pid = loop {
            match spawn(&e, &|| Ok(()), &blocked()) {
                Err(err) if err.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                other => break other.unwrap(),
            }
        };
        assert_eq!(wait(pid), 5);
    }

    #[test]
    fn the_child_gets_the_mask_asked_for_not_the_callers() {
        let d = tempfile::tempdir().unwrap();
        let mut term = empty_set();
        // SAFETY: adds one signal to a local set.
        unsafe { libc::sigaddset(&mut term, libc::SIGTERM) };
        let e = exec("/bin/sleep", &["30"], d.path());
        let pid = spawn(&e, &|| Ok(()), &term).unwrap();
        // `spawn` returns once the child has left our memory (the vfork completion in
        // execve), but the kernel renames the task a little later, so the status is read
        // once it names the new program.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let status = loop {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            if status.starts_with("Name:\tsleep\n") || std::time::Instant::now() > deadline {
                break status;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        // SAFETY: kill and reap the child this test spawned.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let mut st = 0;
        // SAFETY: reaps the child this test spawned, into a local.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        // SIGTERM is signal 15: bit 14.
        assert!(status.starts_with("Name:\tsleep\n"), "{status}");
        assert!(status.contains("\nSigBlk:\t0000000000004000\n"), "{status}");
    }

    #[test]
    fn strings_with_nul_or_a_relative_program_are_left_to_command() {
        let env = BTreeMap::new();
        let cwd = Path::new("/");
        assert!(Exec::new(Path::new("true"), &[], &env, cwd).is_none());
        assert!(Exec::new(Path::new("/bin/true"), &["a\0b".into()], &env, cwd).is_none());
        assert!(Exec::new(Path::new("/bin/true"), &[], &env, cwd).is_some());
    }
}
