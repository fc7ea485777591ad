//! CPUs: those this process may run on, pinning a thread to one, and the
//! CPU clocks. Poll groups and the bench use them; this file must never
//! decide how many groups there are.

use std::io;

/// The CPUs this process may run on (its affinity mask), in order.
pub fn allowed() -> io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, and
    // sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads the set within its bounds.
    Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// CPU time used so far by this thread or this process, in nanoseconds.
pub fn cpu_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time a thread has used, in nanoseconds (its `pthread_getcpuclockid`
/// clock), read from another thread. `None` if it cannot be read.
pub fn thread_cpu_ns<T>(thread: &std::thread::JoinHandle<T>) -> Option<u64> {
    use std::os::unix::thread::JoinHandleExt;
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a handle not yet joined names a thread that still exists (a
    // finished one's clock still reads); both calls write only what we pass.
    let ok = unsafe {
        libc::pthread_getcpuclockid(thread.as_pthread_t(), &mut clock) == 0
            && libc::clock_gettime(clock, &mut ts) == 0
    };
    ok.then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Pin the calling thread to `cpu`.
pub fn pin(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no CPU {cpu}")));
    }
    // SAFETY: as in `allowed`; CPU_SET writes within the set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    match unsafe { libc::sched_setaffinity(0, size, &set) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pins_to_a_cpu_it_may_run_on() {
        let cpus = allowed().unwrap();
        assert!(!cpus.is_empty());
        let last = *cpus.last().unwrap();
        std::thread::spawn(move || {
            pin(last).unwrap();
            // SAFETY: sched_getcpu has no preconditions.
            assert_eq!(unsafe { libc::sched_getcpu() }, last as i32);
        })
        .join()
        .unwrap();
        assert!(pin(libc::CPU_SETSIZE as usize).is_err());
    }
}
