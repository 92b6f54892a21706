//! One request connection's stages (`--stages`), whichever engine carries its messages
//! (system calls or io_uring): its messages' readings ([`Book`]), the stamps of its sends
//! read from the error queue, and (TCP) the echo's figures read off the stream.

use std::os::fd::RawFd;

use super::plan::{ClientPlan, WorkerEnd};
use super::recorder::Recorder;
use crate::kstamps::{
    stream_read, Book, EchoFigures, ErrQueue, Heads, RxRead, Sampling, TxControl, FIGURE_BYTES,
};
use crate::udp_match::REQUEST_HEADER_BYTES;

pub(crate) struct Stamps {
    book: Book,
    queue: ErrQueue,
    heads: Heads,
    /// Requests started (a UDP request's sequence number; a TCP one's index).
    started: u64,
    /// TCP: answers completed (the index of the next one).
    completed: u64,
    /// The message being sent is sampled and its sends ask for their stamps.
    asking: bool,
    /// What they ask with (its key, UDP's sequence, set per message).
    control: TxControl,
    sampling: Sampling,
    udp: bool,
}

/// One read's answers, as the stages need them.
pub(crate) struct Read<'a> {
    pub data: &'a [u8],
    pub udp: bool,
    /// Answers the read completed.
    pub responses: usize,
    /// The read's receive stamp, and the real clock after it.
    pub readings: (Option<u64>, u64),
    /// Inside the measured window.
    pub counted: bool,
}

impl Stamps {
    /// With stages (else `None`): switches `fd`'s kernel timestamps on, before its first
    /// request, and makes its readings.
    pub fn new(fd: RawFd, udp: bool, p: &ClientPlan) -> Result<Option<Stamps>, WorkerEnd> {
        if !p.stages {
            return Ok(None);
        }
        let sampling = Sampling::new(p.stage_every).with_hardware_rx(p.hardware_rx);
        sampling.enable(fd).map_err(|e| WorkerEnd {
            error: Some(format!("SO_TIMESTAMPING: {e}")),
            ..Default::default()
        })?;
        Ok(Some(Stamps {
            book: Book::new((!udp).then_some(p.request_bytes), p.window, sampling),
            queue: ErrQueue::default(),
            heads: Heads::new(p.response_bytes),
            started: 0,
            completed: 0,
            asking: false,
            control: TxControl::new(None),
            sampling,
            udp,
        }))
    }

    /// The next request starts; `clock` reads the real clock just before it goes out,
    /// read only for a sampled message.
    #[inline]
    pub fn sent(&mut self, clock: impl FnOnce() -> u64) {
        let index = self.started;
        self.started += 1;
        self.asking = false;
        if !self.book.sampled(index) {
            return;
        }
        // The ask is written before the clock is read: the send stage is the send's own.
        if self.sampling.per_send() {
            self.asking = true;
            let key = (self.udp && self.sampling.opt_id).then_some(index as u32);
            self.control = TxControl::new(key);
        }
        self.book.sent(index, clock());
    }

    /// What the current message's sends carry to ask for their stamps (`None`: nothing,
    /// unsampled or the socket asks for every send's).
    #[inline]
    pub fn asking(&self) -> Option<&TxControl> {
        self.asking.then_some(&self.control)
    }

    /// How the next read goes ([`RxRead`]): stamped only when it may complete a sampled
    /// answer. TCP: `partial` bytes of the next answer are in, answers are `answer_bytes`;
    /// UDP: while a sampled datagram is unanswered.
    #[inline]
    pub fn rx_read(&self, partial: usize, answer_bytes: usize, room: usize) -> RxRead {
        if self.udp {
            return RxRead {
                stamped: self.sampling.every == 1 || self.book.awaits_answer(),
                len: room,
            };
        }
        let next = (self.completed, partial);
        stream_read(&self.sampling, next, answer_bytes, self.started, room)
    }

    /// Reads the stamps of its sends from `fd`'s error queue, when one is awaited (or
    /// `always`: one woke the wait). Asked after every send and read: with nothing
    /// booked (most of the time, sampled) it returns without a call.
    #[inline]
    pub fn collect(&mut self, fd: RawFd, always: bool) {
        if always || !self.book.is_empty() {
            self.read_queue(fd, always);
        }
    }

    fn read_queue(&mut self, fd: RawFd, always: bool) {
        let book = &mut self.book;
        if always {
            let _ = self.queue.drain(fd, |s| book.stamped(s));
            return;
        }
        // The stamps awaited, in one call that asks for no more; only when it filled and
        // a stamp is still awaited may more be queued (one a partial send's).
        let expect = book.stamps_awaited();
        if expect == 0 {
            return;
        }
        let got = self.queue.read_expected(fd, expect, |s| book.stamped(s));
        if got.is_ok_and(|n| n == expect.min(ErrQueue::BATCH)) && book.wants_stamps() {
            let _ = self.queue.drain(fd, |s| book.stamped(s));
        }
    }

    /// Whether a read of `data` that completed `responses` answers answers a sampled
    /// message (its real clock is read only then): TCP's the next `responses` in order, a
    /// matched UDP reply by its sequence (`matched`: 1 answer).
    #[inline]
    pub fn samples(&self, data: &[u8], responses: usize) -> bool {
        if self.sampling.every == 1 {
            return true;
        }
        if self.udp {
            return responses == 1
                && data.get(..8).is_some_and(|h| {
                    self.book
                        .sampled(u64::from_le_bytes(h.try_into().expect("8 bytes")))
                });
        }
        self.sampling.next_sampled(self.completed) < self.completed + responses as u64
    }

    /// Gives the book the answers of one read: TCP's in order, a matched UDP reply by the
    /// sequence number it echoes.
    pub fn answered(&mut self, r: Read<'_>) {
        if r.udp {
            if r.responses == 1 {
                let seq = u64::from_le_bytes(r.data[..8].try_into().expect("a matched reply"));
                let f = r
                    .data
                    .get(REQUEST_HEADER_BYTES..)
                    .and_then(EchoFigures::read);
                self.book.answered(seq, r.readings, f, r.counted);
            }
            return;
        }
        // Whole answers read from an answer's start (the usual read): their figures are
        // read in place, and only those the book uses (a sampled answer's, or one that
        // tells an earlier answer's send stack).
        let size = self.heads.answer_bytes();
        if self.heads.aligned() && size >= FIGURE_BYTES && r.data.len() == r.responses * size {
            for head in r.data.chunks_exact(size) {
                let index = self.completed;
                let wanted = self.book.sampled(index) || EchoFigures::tells_send(head);
                let f = wanted.then(|| EchoFigures::read(head)).flatten();
                self.book.answered(index, r.readings, f, r.counted);
                self.completed += 1;
            }
            return;
        }
        self.heads.feed(r.data);
        for _ in 0..r.responses {
            let f = self.heads.take();
            self.book.answered(self.completed, r.readings, f, r.counted);
            self.completed += 1;
        }
    }

    /// Files its complete messages under the recorder's interval (`all`: at the end,
    /// every one).
    pub fn file(&mut self, rec: &mut Recorder<'_>, all: bool) {
        rec.file_stages(&mut self.book, all);
    }
}
