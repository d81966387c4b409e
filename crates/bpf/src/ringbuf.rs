//! Reading a BPF ring buffer from user space.
//!
//! Layout (fd offsets): the consumer page (consumer position at byte 0, ours to write),
//! then the producer page (producer position at byte 0), then the data area, which the
//! kernel maps twice in a row so that a record wrapping at the end reads contiguously.
//! udtrace maps it once (the second copy would count twice in its resident size, the
//! kernel's pages being mapped in whole) and copies the rare record that wraps.
//! Each record starts with an 8-byte header: a u32 length whose bit 31 says the producer
//! has not committed it yet and bit 30 that it was discarded, then a u32 page offset.
//! Records are 8-byte aligned.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use thiserror::Error;

use udtrace_sys::mmap::{page_size, poll_readable, Mmap};

use crate::maps::RingBuf;

const BUSY: u32 = 1 << 31;
const DISCARD: u32 = 1 << 30;
const HDR: u64 = 8;

#[derive(Debug, Error)]
pub enum RingBufError {
    #[error("cannot map the ring buffer: {0}")]
    Map(io::Error),
    #[error("cannot wait on the ring buffer: {0}")]
    Poll(io::Error),
}

/// The consumer side of one [`RingBuf`]; it keeps the map open through its own
/// descriptor and mappings, so it does not borrow the map.
pub struct RingBufReader {
    ring: OwnedFd,
    consumer: Mmap,
    producer: Mmap,
    page: usize,
    mask: u64,
    /// A record that wraps at the end of the data area, made whole.
    wrapped: Vec<u8>,
}

impl RingBufReader {
    pub fn new(ring: &RingBuf) -> Result<RingBufReader, RingBufError> {
        let page = page_size();
        let size = ring.size();
        let consumer = Mmap::map(ring.as_fd(), page, 0, true).map_err(RingBufError::Map)?;
        let producer = Mmap::map(ring.as_fd(), page + size, page as u64, false).map_err(RingBufError::Map)?;
        let ring = ring.as_fd().try_clone_to_owned().map_err(RingBufError::Map)?;
        Ok(RingBufReader { ring, consumer, producer, page, mask: size as u64 - 1, wrapped: Vec::new() })
    }

    /// Waits until a record may be ready or the timeout passes (`None` = no limit).
    /// Ok(false) on timeout or a signal; call [`Self::consume`] either way.
    pub fn poll(&self, timeout: Option<Duration>) -> Result<bool, RingBufError> {
        let ms = match timeout {
            None => -1,
            Some(d) => d.as_millis().min(i32::MAX as u128) as i32,
        };
        poll_readable(self.ring.as_fd(), ms).map_err(RingBufError::Poll)
    }

    /// Hands every committed record to `f`, in the order they were reserved, and frees
    /// each one after `f` returns. Stops at the first record still being written.
    /// Returns how many records `f` saw.
    pub fn consume(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        let mut seen = 0;
        let mut cons = self.consumer.load_acquire_u64(0);
        // What is there now, no more: under a stream of firings faster than the
        // consumer, reading on until the ring is empty would never return, and the
        // session's timers (tick, exit) would never run.
        let prod = self.producer.load_acquire_u64(0);
        loop {
            if cons >= prod {
                break;
            }
            let at = self.page + (cons & self.mask) as usize;
            let len_word = self.producer.load_acquire_u32(at);
            if len_word & BUSY != 0 {
                break;
            }
            let len = (len_word & !(BUSY | DISCARD)) as u64;
            if len_word & DISCARD == 0 {
                // Headers are 8-byte aligned and never wrap; a record's data may.
                let size = self.mask as usize + 1;
                let data = ((cons + HDR) & self.mask) as usize;
                let len = (len as usize).min(size);
                if data + len <= size {
                    f(self.producer.bytes(self.page + data, len));
                } else {
                    let first = size - data;
                    self.wrapped.clear();
                    self.wrapped.extend_from_slice(self.producer.bytes(self.page + data, first));
                    self.wrapped.extend_from_slice(self.producer.bytes(self.page, len - first));
                    f(&self.wrapped);
                }
                seen += 1;
            }
            cons += (len + HDR).div_ceil(8) * 8;
            // Release: the kernel may reuse the space only after we are done reading it.
            self.consumer.store_release_u64(0, cons);
        }
        seen
    }
}
