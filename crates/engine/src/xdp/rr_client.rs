//! Request client workers whose requests are whole UDP frames on AF_XDP sockets: each
//! flow's frame is built once and only its sequence number is rewritten; the answers come
//! back on the worker's sockets, steered there by the XDP program, and name their flow by
//! their destination port (the flow's source port), an offset into a table. Same windows,
//! pacing and loss rules as the socket workers ([`Flight`]); the wait is on the rings, and
//! the clock is read once per batch of answers.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::frame::{payload_offset, udp_frame, udp_to, Endpoints};
use super::{socket_of, Xsk};
use crate::pool::{Placement, Stop};
use crate::rr_client::flight::{self, Flight};
use crate::rr_client::recorder::{recording, Recorder};
use crate::rr_client::workers::{Core, Shared, WorkerCounters, COMPLETED, SENT};
use crate::rr_client::{ClientPlan, RrClient, WorkerEnd};
use crate::udp_match::{stamp_cookie, Reply, REQUEST_HEADER_BYTES, SEQ_BYTES};
use crate::wait::Multi;

/// Frames taken from a receive ring per call.
const BATCH: u32 = 64;

/// Where AF_XDP requests go.
pub struct XdpTarget {
    /// One socket per receive queue: worker k takes the sockets k, k + workers, ... and
    /// sends on the first.
    pub xsks: Vec<Xsk>,
    /// A flow per connection.
    pub flows: Vec<Endpoints>,
    /// The sockets have SO_BUSY_POLL, so a spinning worker enters the kernel to drive them.
    pub busy_polling: bool,
}

/// Request workers on AF_XDP sockets: no more workers than sockets.
pub fn spawn(target: XdpTarget, plan: ClientPlan) -> io::Result<RrClient> {
    let XdpTarget {
        xsks,
        flows,
        busy_polling,
    } = target;
    let threads = plan.placement.threads.min(xsks.len()).max(1);
    let units = flows.len();
    let placement = Placement::new(threads, plan.placement.cpus.clone(), units);
    let shared = Arc::new(Frames {
        core: Core::new(plan, threads)?,
        xsks: xsks.into_iter().map(Mutex::new).collect(),
        flows,
        busy_polling,
    });
    let deal = placement.clone();
    RrClient::start(&placement, shared, move |s: &Frames, k| {
        recording(&s.core, k, |rec| {
            match Worker::new(s, k, &deal.owned(k, units), rec) {
                Ok(w) => w.run(),
                Err(end) => end,
            }
        })
    })
}

struct Frames {
    core: Core,
    xsks: Vec<Mutex<Xsk>>,
    flows: Vec<Endpoints>,
    busy_polling: bool,
}

impl Shared for Frames {
    fn core(&self) -> &Core {
        &self.core
    }
}

/// Stop contract: the flag is read at every wake-up, and the eventfd wakes a worker
/// waiting in epoll.
impl Stop for Frames {
    fn abort(&self) {
        self.core.abort();
    }
}

/// The worker's flows by the port their answers arrive on: slot `port - first` holds the
/// flow's index (the ports are the flows' own, close together), so a lookup is an offset.
struct ByPort {
    first: u16,
    slots: Vec<u16>,
}

/// An empty slot; a test has at most 1024 flows, far fewer than this.
const NO_FLOW: u16 = u16::MAX;

impl ByPort {
    fn new(ports: &[u16]) -> ByPort {
        let first = ports.iter().copied().min().unwrap_or(0);
        let last = ports.iter().copied().max().unwrap_or(0);
        let mut slots = vec![NO_FLOW; usize::from(last - first) + 1];
        for (i, &port) in ports.iter().enumerate() {
            slots[usize::from(port - first)] = i as u16;
        }
        ByPort { first, slots }
    }

    #[inline]
    fn get(&self, port: u16) -> Option<usize> {
        let slot = *self.slots.get(usize::from(port.wrapping_sub(self.first)))?;
        (slot != NO_FLOW).then_some(usize::from(slot))
    }
}

struct Flow {
    frame: Vec<u8>,
    flight: Flight,
}

/// A flow's request frame, cookie in place; only the sequence number changes after.
fn request_frame(e: &Endpoints, request_bytes: usize, cookie: u64) -> Vec<u8> {
    let mut frame = udp_frame(e, request_bytes.max(REQUEST_HEADER_BYTES));
    stamp_cookie(&mut frame[payload_offset(&e.dst)..], cookie);
    frame
}

/// A worker's flows and accounting: everything but its sockets, so that a ring's
/// callback can take it whole.
struct Flows<'a, 'r> {
    p: &'a ClientPlan,
    counters: &'a WorkerCounters,
    rec: &'a mut Recorder<'r>,
    own: Vec<Flow>,
    by_port: ByPort,
    /// Where each frame's sequence number goes.
    seq_at: usize,
    /// (flow, sequence number) of each request the next send carries.
    batch: Vec<(usize, [u8; SEQ_BYTES])>,
    end: WorkerEnd,
}

struct Worker<'a, 'r> {
    shared: &'a Frames,
    xsks: Vec<MutexGuard<'a, Xsk>>,
    multi: Multi,
    ready: Vec<usize>,
    flows: Flows<'a, 'r>,
    /// The last request sent or answer read: hybrid spins for a while after it.
    last_message: Instant,
}

impl<'a, 'r> Worker<'a, 'r> {
    /// Worker `k` over the flows `owned`: its sockets k, k + workers, ...
    fn new(
        shared: &'a Frames,
        k: usize,
        owned: &[usize],
        rec: &'a mut Recorder<'r>,
    ) -> Result<Self, WorkerEnd> {
        let failed = |error: String| WorkerEnd {
            error: Some(error),
            ..Default::default()
        };
        let p = &shared.core.plan;
        let workers = shared.core.counters.len();
        let xsks = (k..shared.xsks.len())
            .step_by(workers)
            .map(|i| socket_of(&shared.xsks, i))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| failed(e.to_string()))?;
        let fds: Vec<_> = xsks.iter().map(|x| x.fd()).collect();
        let multi = Multi::new(&fds, Some(shared.core.wake.raw()))
            .map_err(|e| failed(format!("epoll: {e}")))?;
        let start = Instant::now();
        let mine: Vec<Endpoints> = owned.iter().map(|&i| shared.flows[i]).collect();
        let own = (mine.iter().enumerate())
            .map(|(i, e)| Flow {
                frame: request_frame(e, p.request_bytes, p.cookie),
                flight: Flight::new(p, start, i, mine.len()),
            })
            .collect();
        let ports: Vec<u16> = mine.iter().map(|e| e.src.port()).collect();
        let flows = Flows {
            p,
            counters: &shared.core.counters[k],
            rec,
            own,
            by_port: ByPort::new(&ports),
            seq_at: mine.first().map_or(0, |e| payload_offset(&e.dst)),
            batch: Vec::with_capacity(p.window * mine.len()),
            end: WorkerEnd::default(),
        };
        Ok(Worker {
            shared,
            ready: Vec::with_capacity(xsks.len()),
            xsks,
            multi,
            flows,
            last_message: start,
        })
    }

    fn run(mut self) -> WorkerEnd {
        while self.step() {}
        let f = self.flows;
        let mut end = f.end;
        for flow in &f.own {
            flow.flight.account(f.p, &mut end);
        }
        end
    }

    /// One pass: send what is due and fits, wait (or spin), take the answers, expire the
    /// lost; false when the worker is done.
    fn step(&mut self) -> bool {
        let p = self.flows.p;
        let now = Instant::now();
        // An AF_XDP worker's flows share its sockets: none dies alone.
        let aborting = self.shared.core.aborting();
        let outstanding = || self.flows.outstanding();
        let Some(sending) = p.goes_on(now, aborting, outstanding, || false) else {
            return false;
        };
        self.send(now, sending);
        self.flows.rec.flush_if_due(now);
        let spin = p.poll.spins(now, self.last_message);
        if !spin && !self.wait(now, sending) {
            return false;
        }
        let answered_at = self.receive();
        if let Some(t) = answered_at {
            self.last_message = t;
        } else if spin && self.shared.busy_polling {
            self.xsks.iter().for_each(|x| x.poke());
        }
        let now = answered_at.unwrap_or_else(Instant::now);
        for f in self.flows.own.iter_mut() {
            self.flows.end.lost += f.flight.expire(p, now);
        }
        true
    }

    /// Due requests, then as many as the windows and the first socket's ring allow.
    fn send(&mut self, now: Instant, sending: bool) {
        let room = self.xsks[0].room() as usize;
        let n = self.flows.queue(now, sending, room);
        if n == 0 {
            return;
        }
        let f = &self.flows;
        let mut next = f.batch.iter();
        let sent = self.xsks[0].send(n as u32, |out| {
            let (i, seq) = next.next().expect("one frame per batch entry");
            let frame = &f.own[*i].frame;
            out[..frame.len()].copy_from_slice(frame);
            out[f.seq_at..f.seq_at + SEQ_BYTES].copy_from_slice(seq);
            frame.len()
        });
        f.counters.add_to(SENT, sent as u64);
        self.last_message = now;
    }

    /// Sleeps in epoll until an answer or a deadline; false on an error (or the eventfd's
    /// abort).
    fn wait(&mut self, now: Instant, sending: bool) -> bool {
        let f = &self.flows;
        let paced = f.own.iter().map(|f| f.flight.next_due);
        let loss = f.own.iter().filter_map(|x| x.flight.loss_due(f.p));
        let deadline = flight::deadline(f.p, f.rec.due(), paced, loss, sending);
        match self.multi.wait(now, deadline, false, &mut self.ready) {
            Ok(woke) => woke,
            Err(e) => {
                self.flows.end.error = Some(format!("epoll on AF_XDP sockets: {e}"));
                false
            }
        }
    }

    /// Takes every socket's answers; the time of the last batch, if any came.
    fn receive(&mut self) -> Option<Instant> {
        let mut last = None;
        for x in self.xsks.iter_mut() {
            let flows = &mut self.flows;
            let mut at = None;
            x.recv(BATCH, |frame| {
                let t = *at.get_or_insert_with(Instant::now);
                flows.answer(frame, t);
            });
            last = at.or(last);
        }
        last
    }
}

impl Flows<'_, '_> {
    fn outstanding(&self) -> usize {
        self.own.iter().map(|f| f.flight.started).sum()
    }

    /// Makes due requests and queues up to `room` of them in [`Flows::batch`]; how many.
    fn queue(&mut self, now: Instant, sending: bool, mut room: usize) -> usize {
        self.batch.clear();
        for (i, f) in self.own.iter_mut().enumerate() {
            if sending {
                self.end.not_sent += f.flight.make_due(self.p, now);
            }
            while room > 0 && f.flight.may_start(self.p.window) {
                f.flight.start(true, None);
                self.batch.push((i, f.flight.seq.newest()));
                room -= 1;
            }
        }
        self.batch.len()
    }

    /// One frame from a ring, taken at `t`: its flow's answer, or foreign.
    #[inline]
    fn answer(&mut self, frame: &[u8], t: Instant) {
        let flow =
            udp_to(frame).and_then(|(port, payload)| Some((self.by_port.get(port)?, payload)));
        let Some((i, payload)) = flow else {
            self.end.foreign += 1;
            return;
        };
        let f = &mut self.own[i];
        if let Reply::Matched(pos) = f.flight.seq.reply(payload) {
            if let Some(started) = f.flight.answered(self.p, pos, t) {
                self.rec.record(started, t);
                self.counters.add_to(COMPLETED, 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ByPort;

    #[test]
    fn flows_are_found_by_their_port_offset() {
        let by = ByPort::new(&[40_007, 40_001, 40_100]);
        assert_eq!(by.get(40_001), Some(1));
        assert_eq!(by.get(40_007), Some(0));
        assert_eq!(by.get(40_100), Some(2));
        for other in [0, 40_000, 40_002, 40_101, u16::MAX] {
            assert_eq!(by.get(other), None, "{other}");
        }
        assert_eq!(ByPort::new(&[]).get(0), None);
    }
}
