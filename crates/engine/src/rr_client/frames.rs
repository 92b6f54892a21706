//! A worker whose requests are whole UDP frames on AF_XDP sockets: each flow's frame is
//! built once and only its sequence number is rewritten; the answers come back on the
//! worker's sockets, steered there by the XDP program, and name their flow by their
//! destination port (the flow's source port). Same windows, pacing and loss rules as the
//! socket workers ([`Flight`]); the wait is on the rings.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::time::Instant;

use super::flight::{self, Flight};
use super::{Recorder, Shared, WorkerEnd, COMPLETED, SENT};
use crate::udp_match::{stamp_cookie, Reply, REQUEST_HEADER_BYTES, SEQ_BYTES};
use crate::wait::Multi;
use crate::xdp::frame::{payload_offset, udp_frame, udp_to, Endpoints};
use crate::xdp::Xsk;

/// Frames taken from a receive ring per call.
const BATCH: u32 = 64;

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

/// Runs worker `k` over `flows` (its own), sending on the first of `xsks` and taking
/// answers from all of them.
pub(super) fn run(
    shared: &Shared,
    k: usize,
    flows: &[Endpoints],
    mut xsks: Vec<MutexGuard<'_, Xsk>>,
    rec: &mut Recorder<'_>,
) -> WorkerEnd {
    let p = &shared.plan;
    let mut end = WorkerEnd::default();
    let fds: Vec<_> = xsks.iter().map(|x| x.fd()).collect();
    let mut multi = match Multi::new(&fds, Some(shared.wake.raw())) {
        Ok(m) => m,
        Err(e) => {
            end.error = Some(format!("epoll: {e}"));
            return end;
        }
    };
    let start = Instant::now();
    let n = flows.len();
    let mut own: Vec<Flow> = flows
        .iter()
        .enumerate()
        .map(|(i, e)| Flow {
            frame: request_frame(e, p.request_bytes, p.cookie),
            flight: Flight::new(p, start, i, n),
        })
        .collect();
    let by_port: HashMap<u16, usize> = flows
        .iter()
        .enumerate()
        .map(|(i, e)| (e.src.port(), i))
        .collect();
    let seq_at = flows.first().map_or(0, |e| payload_offset(&e.dst));
    let counters = &shared.counters[k];
    let mut batch: Vec<(usize, [u8; SEQ_BYTES])> = Vec::with_capacity(p.window * n);
    let mut ready = Vec::with_capacity(xsks.len());
    let mut last_message = start;
    while !shared.aborting.load(Ordering::Relaxed) {
        let now = Instant::now();
        let sending = now < p.stop_sending_at;
        let outstanding: usize = own.iter().map(|f| f.flight.started).sum();
        if !sending && (outstanding == 0 || now >= p.drain_until) {
            break;
        }
        // Due requests, then as many as the windows and the tx ring allow.
        let mut room = xsks[0].room() as usize;
        batch.clear();
        for (i, f) in own.iter_mut().enumerate() {
            if sending {
                end.not_sent += f.flight.make_due(p, now);
            }
            while room > 0 && f.flight.may_start(p.window) {
                f.flight.start(true);
                batch.push((i, f.flight.seq.newest()));
                room -= 1;
            }
        }
        if !batch.is_empty() {
            let mut next = batch.iter();
            let sent = xsks[0].send(batch.len() as u32, |out| {
                let (i, seq) = next.next().expect("one frame per batch entry");
                let frame = &own[*i].frame;
                out[..frame.len()].copy_from_slice(frame);
                out[seq_at..seq_at + SEQ_BYTES].copy_from_slice(seq);
                frame.len()
            });
            counters.add_to(SENT, sent as u64);
            last_message = now;
        }
        // Wait: spin on the rings, or sleep in epoll until an answer or a deadline.
        rec.flush_if_due(now);
        let spin = p.poll.spins(now, last_message);
        if !spin {
            let paced = own.iter().map(|f| f.flight.next_due);
            let loss = own.iter().filter_map(|f| f.flight.loss_due(p));
            let deadline = flight::deadline(p, rec.due(), paced, loss, sending);
            match multi.wait(now, deadline, false, &mut ready) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    end.error = Some(format!("epoll on AF_XDP sockets: {e}"));
                    break;
                }
            }
        }
        let mut got = 0;
        for x in xsks.iter_mut() {
            got += x.recv(BATCH, |frame| {
                let t = Instant::now();
                let Some((port, payload)) = udp_to(frame) else {
                    end.foreign += 1;
                    return;
                };
                let Some(f) = by_port.get(&port).map(|&i| &mut own[i]) else {
                    end.foreign += 1;
                    return;
                };
                if let Reply::Matched(pos) = f.flight.seq.reply(payload) {
                    if let Some(s) = f.flight.answered(p, pos, t) {
                        rec.record(s, t);
                        counters.add_to(COMPLETED, 1);
                    }
                }
            });
        }
        if got > 0 {
            last_message = Instant::now();
        } else if spin && shared.busy_polling {
            for x in xsks.iter() {
                x.poke();
            }
        }
        let now = Instant::now();
        for f in own.iter_mut() {
            end.lost += f.flight.expire(p, now);
        }
    }
    for f in &own {
        f.flight.account(p, &mut end);
    }
    end
}
