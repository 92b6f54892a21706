//! `sonde serve` as a set of services (the agent, the STAMP reflector, the mesh, its
//! `/metrics`): each is started from its own configuration into a handle that owns its
//! threads and its shutdown, and one owner, [`Services`], stops them all in one order:
//! **the reverse of their start**. A service is started after what it relies on (the
//! mesh's `/metrics` after the mesh, the agent last, as its "listening" line tells scripts
//! that every port is bound), so it stops before it: the agent first (no test starts while
//! the rest winds down), then `/metrics`, then the mesh, then the STAMP reflector. Each is
//! stopped and joined before the next is asked to stop.

use std::time::{Duration, Instant};

use crate::signals::Interrupt;

/// How often the owner looks whether a service ended by itself while no signal came.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// A running service: the handle its start returned.
pub trait Service: Send {
    /// Its name in logs and errors ("agent", "mesh", ...).
    fn name(&self) -> &'static str;
    /// Asks its threads to end; returns at once.
    fn stop(&self);
    /// Whether its threads have all ended (by themselves, or after [`Service::stop`]).
    fn finished(&self) -> bool;
    /// Waits for every thread it started; what went wrong in them, if anything.
    fn join(self: Box<Self>) -> Result<(), ServiceError>;
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("the {0}'s thread panicked")]
    Panicked(&'static str),
    #[error("the {0} stopped by itself")]
    Ended(&'static str),
}

/// The services running, in their start order; each stopped in the reverse order by
/// [`Services::stop`], or when the owner is dropped (an error while starting the next).
#[derive(Default)]
pub struct Services {
    running: Vec<Box<dyn Service>>,
}

impl Services {
    pub fn new() -> Services {
        Services::default()
    }

    /// One more, started after those already here (and so stopped before them).
    pub fn add(&mut self, service: Box<dyn Service>) {
        self.running.push(service);
    }

    /// Waits until `interrupt` (a stop signal) or until a service ends by itself, then
    /// stops them all; a service that ended by itself is an error naming it.
    pub fn run(self, interrupt: &Interrupt) -> Result<(), ServiceError> {
        let ended = loop {
            if let Some(s) = self.running.iter().find(|s| s.finished()) {
                break Some(s.name());
            }
            if !interrupt.sleep_until(Instant::now() + LOOK_EVERY) {
                break None;
            }
        };
        let stopped = self.stop();
        match ended {
            Some(name) => stopped.and(Err(ServiceError::Ended(name))),
            None => stopped,
        }
    }

    /// Stops and joins each service, the last started first; the first error, once all
    /// are stopped.
    pub fn stop(mut self) -> Result<(), ServiceError> {
        self.stop_all()
    }

    fn stop_all(&mut self) -> Result<(), ServiceError> {
        let mut first = Ok(());
        while let Some(s) = self.running.pop() {
            let name = s.name();
            s.stop();
            let joined = s.join();
            tracing::info!("{name} stopped");
            if first.is_ok() {
                first = joined;
            }
        }
        first
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        let _ = self.stop_all();
    }
}

/// A started service: what its users read (`handle`: its address, its shared state,
/// reached through `Deref`) and the threads it owns, through which it is a [`Service`]
/// (the one forwarding of a service's stop and join to its threads).
pub struct Running<T> {
    pub handle: T,
    pub threads: Threads,
}

impl<T> std::ops::Deref for Running<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.handle
    }
}

impl<T: Send> Service for Running<T> {
    fn name(&self) -> &'static str {
        self.threads.name
    }

    fn stop(&self) {
        self.threads.stop();
    }

    fn finished(&self) -> bool {
        self.threads.finished()
    }

    fn join(self: Box<Self>) -> Result<(), ServiceError> {
        Box::new(self.threads).join()
    }
}

/// The common handle: a stop flag and the threads that read it.
pub struct Threads {
    pub name: &'static str,
    pub stop: Interrupt,
    pub threads: Vec<std::thread::JoinHandle<()>>,
}

impl Threads {
    /// No thread yet, its flag not set.
    pub fn new(name: &'static str) -> Threads {
        Threads {
            name,
            stop: Interrupt::none(),
            threads: Vec::new(),
        }
    }

    /// One more thread, named `thread` (as `ps -T` shows it), that ends once
    /// [`Threads::stop`] is set; if it cannot start, the others are told to stop.
    pub fn spawn(
        &mut self,
        thread: &str,
        run: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<()> {
        let spawned = std::thread::Builder::new().name(thread.into()).spawn(run);
        self.threads.push(spawned.inspect_err(|_| self.stop.set())?);
        Ok(())
    }
}

impl Service for Threads {
    fn name(&self) -> &'static str {
        self.name
    }

    fn stop(&self) {
        self.stop.set();
    }

    fn finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    fn join(self: Box<Self>) -> Result<(), ServiceError> {
        let mut result = Ok(());
        for t in self.threads {
            if t.join().is_err() {
                result = Err(ServiceError::Panicked(self.name));
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A fake service that writes what is done to it into a shared log and runs one
    /// thread until stopped (or ends at once, `ends`).
    struct Fake {
        name: &'static str,
        log: Arc<Mutex<Vec<String>>>,
        inner: Threads,
    }

    fn fake(name: &'static str, log: &Arc<Mutex<Vec<String>>>, ends: bool) -> Box<Fake> {
        let stop = Interrupt::none();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !ends && !flag.is_set() {
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        Box::new(Fake {
            name,
            log: log.clone(),
            inner: Threads {
                name,
                stop,
                threads: vec![thread],
            },
        })
    }

    impl Service for Fake {
        fn name(&self) -> &'static str {
            self.name
        }
        fn stop(&self) {
            self.log.lock().unwrap().push(format!("stop {}", self.name));
            self.inner.stop();
        }
        fn finished(&self) -> bool {
            self.inner.finished()
        }
        fn join(self: Box<Self>) -> Result<(), ServiceError> {
            let Fake { name, log, inner } = *self;
            let joined = Box::new(inner).join();
            log.lock().unwrap().push(format!("joined {name}"));
            joined
        }
    }

    fn started(log: &Arc<Mutex<Vec<String>>>) -> Services {
        let mut services = Services::new();
        for name in ["stamp reflector", "mesh", "mesh metrics", "agent"] {
            services.add(fake(name, log, false));
        }
        services
    }

    const ORDER: [&str; 8] = [
        "stop agent",
        "joined agent",
        "stop mesh metrics",
        "joined mesh metrics",
        "stop mesh",
        "joined mesh",
        "stop stamp reflector",
        "joined stamp reflector",
    ];

    #[test]
    fn a_signal_stops_the_last_started_first_each_joined_before_the_next() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let services = started(&log);
        let signal = Interrupt::none();
        signal.set();
        services.run(&signal).unwrap();
        assert_eq!(*log.lock().unwrap(), ORDER);
    }

    #[test]
    fn dropping_the_owner_stops_them_in_the_same_order() {
        let log = Arc::new(Mutex::new(Vec::new()));
        drop(started(&log));
        assert_eq!(*log.lock().unwrap(), ORDER);
    }

    #[test]
    fn a_service_that_ends_by_itself_stops_the_rest_and_is_named() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut services = Services::new();
        services.add(fake("stamp reflector", &log, false));
        services.add(fake("mesh", &log, true));
        services.add(fake("agent", &log, false));
        let e = services.run(&Interrupt::none()).unwrap_err();
        assert_eq!(e.to_string(), "the mesh stopped by itself");
        let log = log.lock().unwrap();
        let stops: Vec<&str> = log.iter().map(String::as_str).collect();
        assert_eq!(
            stops,
            [
                "stop agent",
                "joined agent",
                "stop mesh",
                "joined mesh",
                "stop stamp reflector",
                "joined stamp reflector"
            ]
        );
    }

    #[test]
    fn a_panicked_thread_is_an_error_naming_its_service_and_the_rest_still_stop() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut services = Services::new();
        services.add(fake("stamp reflector", &log, false));
        services.add(Box::new(Threads {
            name: "mesh",
            stop: Interrupt::none(),
            threads: vec![std::thread::spawn(|| panic!("planted"))],
        }));
        while !services.running[1].finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let e = services.stop().unwrap_err();
        assert_eq!(e.to_string(), "the mesh's thread panicked");
        assert_eq!(
            *log.lock().unwrap(),
            ["stop stamp reflector", "joined stamp reflector"]
        );
    }

    /// This process's threads with one of `names`: their ids.
    fn threads_named(names: &[&str]) -> Vec<String> {
        let tasks = std::fs::read_dir("/proc/self/task").unwrap();
        let comm = |t: &std::fs::DirEntry| std::fs::read_to_string(t.path().join("comm"));
        tasks
            .flatten()
            .filter(|t| comm(t).is_ok_and(|c| names.contains(&c.trim())))
            .map(|t| t.file_name().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_real_reflector_and_mesh_leave_no_thread_and_no_port_after_stop() {
        use std::net::{SocketAddr, UdpSocket};
        // As /proc shows them: 15 bytes at most.
        let names = [
            "stamp-reflector",
            "stamp-clock",
            "sonde-mesh",
            "sonde-mesh-cloc",
        ];
        let loopback = std::net::Ipv4Addr::LOCALHOST;
        let reflector = crate::stamp::ReflectorService::start(crate::stamp::ReflectorConfig {
            bind: (loopback, 0).into(),
            allow: Vec::new(),
            max_pps: 10,
            key: None,
            stateful: false,
            dscp_policy: Default::default(),
        })
        .unwrap();
        let list = std::env::temp_dir().join(format!("sonde-service-{}", std::process::id()));
        std::fs::write(&list, "# nobody yet\n").unwrap();
        let mesh = crate::mesh::start(crate::mesh::MeshConfig {
            source: crate::mesh::Source::parse(list.to_str().unwrap(), 0).unwrap(),
            port: 0,
            bind: loopback.into(),
            name: "127.0.0.1".into(),
            labels: Default::default(),
            rate: 1.0,
            budget: 10.0,
            refresh: Duration::from_secs(30),
            timeout: Duration::from_secs(2),
            window: Duration::from_secs(60),
            reflect_max: 100.0,
            key: None,
            tos: None,
            follow_up: false,
        })
        .unwrap();
        let _ = std::fs::remove_file(&list);
        let ports: [SocketAddr; 2] = [reflector.local, mesh.reflector];
        let mut services = Services::new();
        services.add(Box::new(reflector));
        services.add(Box::new(mesh));
        // A thread names itself once it runs.
        let until = std::time::Instant::now() + Duration::from_secs(5);
        let mut running = threads_named(&names);
        while running.len() < 4 && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
            running = threads_named(&names);
        }
        assert_eq!(running.len(), 4, "each service's threads run: {running:?}");
        services.stop().unwrap();
        let left: Vec<String> = threads_named(&names)
            .into_iter()
            .filter(|t| running.contains(t))
            .collect();
        assert!(left.is_empty(), "threads left after stop: {left:?}");
        for port in ports {
            UdpSocket::bind(port).unwrap_or_else(|e| panic!("{port} still held: {e}"));
        }
    }
}
