//! Typed BPF maps: a hash of plain-old-data keys and values, a per-CPU array of counters,
//! and the ring buffer that carries firings to user space.

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use thiserror::Error;

use udtrace_sys::bpf::{self as sys, MapSpec};

const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const BPF_MAP_TYPE_RINGBUF: u32 = 27;

const BPF_ANY: u64 = 0;

#[derive(Debug, Error)]
pub enum MapError {
    #[error("cannot create BPF map {name}: {source}")]
    Create { name: String, source: io::Error },
    #[error("cannot update BPF map: {0}")]
    Update(io::Error),
    #[error("cannot read BPF map: {0}")]
    Lookup(io::Error),
    #[error("cannot delete from BPF map: {0}")]
    Delete(io::Error),
    #[error("ring buffer size {size} must be a power-of-two multiple of the page size ({page})")]
    RingSize { size: usize, page: usize },
    #[error("cannot read the possible CPUs from /sys/devices/system/cpu/possible: {0}")]
    Cpus(String),
}

impl MapError {
    /// The kernel's errno where the kernel refused.
    pub fn os_error(&self) -> Option<&io::Error> {
        match self {
            MapError::Create { source, .. } => Some(source),
            MapError::Update(e) | MapError::Lookup(e) | MapError::Delete(e) => Some(e),
            _ => None,
        }
    }
}

/// Fixed-size values copied byte for byte to and from a map, in native byte order.
pub trait Pod: Copy {
    const SIZE: usize;
    fn write_to(&self, out: &mut [u8]);
    fn read_from(b: &[u8]) -> Self;
}

macro_rules! pod_int {
    ($($t:ty),*) => {$(
        impl Pod for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn write_to(&self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_ne_bytes());
            }
            fn read_from(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::SIZE]);
                <$t>::from_ne_bytes(a)
            }
        }
    )*};
}
pod_int!(u8, u16, u32, u64, i8, i16, i32, i64);

impl<const N: usize> Pod for [u8; N] {
    const SIZE: usize = N;
    fn write_to(&self, out: &mut [u8]) {
        out.copy_from_slice(self);
    }
    fn read_from(b: &[u8]) -> Self {
        let mut a = [0u8; N];
        a.copy_from_slice(&b[..N]);
        a
    }
}

fn bytes_of<T: Pod>(v: &T) -> Vec<u8> {
    let mut b = vec![0u8; T::SIZE];
    v.write_to(&mut b);
    b
}

fn create(
    map_type: u32,
    key_size: usize,
    value_size: usize,
    max_entries: u32,
    flags: u32,
    name: &str,
) -> Result<OwnedFd, MapError> {
    let spec = MapSpec { map_type, key_size: key_size as u32, value_size: value_size as u32, max_entries, flags, name };
    sys::map_create(&spec).map_err(|source| MapError::Create { name: name.to_string(), source })
}

/// A BPF hash map of `K` to `V`.
pub struct HashMap<K: Pod, V: Pod> {
    fd: OwnedFd,
    _types: PhantomData<(K, V)>,
}

impl<K: Pod, V: Pod> HashMap<K, V> {
    pub fn create(name: &str, max_entries: u32) -> Result<Self, MapError> {
        Ok(HashMap { fd: create(BPF_MAP_TYPE_HASH, K::SIZE, V::SIZE, max_entries, 0, name)?, _types: PhantomData })
    }

    /// A hash whose entries are allocated as they are made, not all at creation: for
    /// maps sized for the worst case that hold a few entries (the traced processes),
    /// which udtrace makes at every start (65,536 preallocated entries cost 1.5 ms).
    pub fn create_growing(name: &str, max_entries: u32) -> Result<Self, MapError> {
        let fd = create(BPF_MAP_TYPE_HASH, K::SIZE, V::SIZE, max_entries, BPF_F_NO_PREALLOC, name)?;
        Ok(HashMap { fd, _types: PhantomData })
    }

    /// A hash that, when full, makes room by dropping the entries least recently used:
    /// for facts about processes whose end is never heard of.
    pub fn create_lru(name: &str, max_entries: u32) -> Result<Self, MapError> {
        Ok(HashMap { fd: create(BPF_MAP_TYPE_LRU_HASH, K::SIZE, V::SIZE, max_entries, 0, name)?, _types: PhantomData })
    }

    pub fn insert(&self, key: &K, value: &V) -> Result<(), MapError> {
        sys::map_update_elem(self.fd.as_fd(), &bytes_of(key), K::SIZE, &bytes_of(value), V::SIZE, BPF_ANY)
            .map_err(MapError::Update)
    }

    pub fn get(&self, key: &K) -> Result<Option<V>, MapError> {
        let mut v = vec![0u8; V::SIZE];
        match sys::map_lookup_elem(self.fd.as_fd(), &bytes_of(key), K::SIZE, &mut v, V::SIZE) {
            Ok(()) => Ok(Some(V::read_from(&v))),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(MapError::Lookup(e)),
        }
    }

    /// Whether the key was there.
    pub fn remove(&self, key: &K) -> Result<bool, MapError> {
        match sys::map_delete_elem(self.fd.as_fd(), &bytes_of(key), K::SIZE) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(MapError::Delete(e)),
        }
    }

    /// The fd a generated program loads with `ld_map_fd`.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

impl<K: Pod, V: Pod> AsFd for HashMap<K, V> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The CPUs the kernel may ever bring up, from the kernel's list syntax ("0-3,8").
pub fn possible_cpus() -> Result<usize, MapError> {
    let text =
        std::fs::read_to_string("/sys/devices/system/cpu/possible").map_err(|e| MapError::Cpus(e.to_string()))?;
    parse_cpu_count(&text).ok_or_else(|| MapError::Cpus(format!("unexpected contents {text:?}")))
}

/// Per-CPU arrays are sized by the highest possible CPU id plus one.
fn parse_cpu_count(text: &str) -> Option<usize> {
    let mut max = None;
    for part in text.trim().split(',') {
        let last = part.rsplit('-').next()?;
        let n: usize = last.trim().parse().ok()?;
        max = Some(max.map_or(n, |m: usize| m.max(n)));
    }
    max.map(|m| m + 1)
}

/// A per-CPU array: each CPU has its own copy of every slot (counters without atomics).
pub struct PerCpuArray<V: Pod> {
    fd: OwnedFd,
    ncpus: usize,
    _types: PhantomData<V>,
}

impl<V: Pod> PerCpuArray<V> {
    pub fn create(name: &str, entries: u32) -> Result<Self, MapError> {
        let ncpus = possible_cpus()?;
        Ok(PerCpuArray {
            fd: create(BPF_MAP_TYPE_PERCPU_ARRAY, 4, V::SIZE, entries, 0, name)?,
            ncpus,
            _types: PhantomData,
        })
    }

    /// The kernel hands per-CPU values out with each value padded to 8 bytes.
    fn stride() -> usize {
        V::SIZE.div_ceil(8) * 8
    }

    /// Slot `index` of every possible CPU, in CPU order.
    pub fn get(&self, index: u32) -> Result<Vec<V>, MapError> {
        let stride = Self::stride();
        let mut buf = vec![0u8; stride * self.ncpus];
        let len = buf.len();
        sys::map_lookup_elem(self.fd.as_fd(), &index.to_ne_bytes(), 4, &mut buf, len).map_err(MapError::Lookup)?;
        Ok(buf.chunks(stride).map(V::read_from).collect())
    }

    /// Sets slot `index` on every CPU.
    pub fn set_all(&self, index: u32, value: &V) -> Result<(), MapError> {
        let stride = Self::stride();
        let mut buf = vec![0u8; stride * self.ncpus];
        for c in buf.chunks_mut(stride) {
            value.write_to(&mut c[..V::SIZE]);
        }
        let len = buf.len();
        sys::map_update_elem(self.fd.as_fd(), &index.to_ne_bytes(), 4, &buf, len, BPF_ANY).map_err(MapError::Update)
    }

    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

impl PerCpuArray<u64> {
    pub fn sum(&self, index: u32) -> Result<u64, MapError> {
        Ok(self.get(index)?.iter().sum())
    }
}

impl<V: Pod> AsFd for PerCpuArray<V> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What a [`RawMap`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawKind {
    Hash,
    Array,
    /// Programs for `bpf_tail_call`, by index (values are program fds).
    ProgArray,
    PerCpuHash,
    PerCpuArray,
}

impl RawKind {
    fn map_type(self) -> u32 {
        match self {
            RawKind::Hash => BPF_MAP_TYPE_HASH,
            RawKind::Array => 2,
            RawKind::ProgArray => 3,
            RawKind::PerCpuHash => 5,
            RawKind::PerCpuArray => BPF_MAP_TYPE_PERCPU_ARRAY,
        }
    }

    fn per_cpu(self) -> bool {
        matches!(self, RawKind::PerCpuHash | RawKind::PerCpuArray)
    }
}

/// Hash entries are allocated as they are made, not all at creation: maps sized for
/// the worst case cost only what is used.
const BPF_F_NO_PREALLOC: u32 = 1;
/// `bpf_map_update_elem`'s flag: only a key that is not there yet.
pub const BPF_NOEXIST: u64 = 1;

/// A map whose key and value sizes are known at run time only (rows of aggregations,
/// thread-local variables). Values of per-CPU maps are read and written for every
/// possible CPU at once, CPU after CPU, each padded to 8 bytes.
pub struct RawMap {
    fd: OwnedFd,
    kind: RawKind,
    key_size: usize,
    value_size: usize,
    ncpus: usize,
}

impl RawMap {
    pub fn create(
        kind: RawKind,
        name: &str,
        key_size: usize,
        value_size: usize,
        max_entries: u32,
    ) -> Result<RawMap, MapError> {
        let flags = if matches!(kind, RawKind::Hash | RawKind::PerCpuHash) { BPF_F_NO_PREALLOC } else { 0 };
        let spec = MapSpec {
            map_type: kind.map_type(),
            key_size: key_size as u32,
            value_size: value_size as u32,
            max_entries,
            flags,
            name,
        };
        let fd = sys::map_create(&spec).map_err(|source| MapError::Create { name: name.to_string(), source })?;
        let ncpus = if kind.per_cpu() { possible_cpus()? } else { 1 };
        Ok(RawMap { fd, kind, key_size, value_size, ncpus })
    }

    /// Bytes of one CPU's value as the kernel hands it out.
    pub fn stride(&self) -> usize {
        if self.kind.per_cpu() {
            self.value_size.div_ceil(8) * 8
        } else {
            self.value_size
        }
    }

    /// Possible CPUs (1 for maps that are not per CPU).
    pub fn cpus(&self) -> usize {
        self.ncpus
    }

    fn all_size(&self) -> usize {
        self.stride() * self.ncpus
    }

    /// The value at `key` (per CPU: every CPU's, [`RawMap::stride`] bytes each).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, MapError> {
        let mut v = vec![0u8; self.all_size()];
        let len = v.len();
        match sys::map_lookup_elem(self.fd.as_fd(), key, self.key_size, &mut v, len) {
            Ok(()) => Ok(Some(v)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(MapError::Lookup(e)),
        }
    }

    /// Sets the value at `key` (per CPU: every CPU's, as [`RawMap::get`] gives them).
    pub fn set(&self, key: &[u8], value: &[u8], flags: u64) -> Result<(), MapError> {
        sys::map_update_elem(self.fd.as_fd(), key, self.key_size, value, self.all_size(), flags)
            .map_err(MapError::Update)
    }

    /// Every key now in the map (a hash changed meanwhile may give some twice or miss
    /// some: readers merge, and read again later).
    pub fn keys(&self) -> Result<Vec<Vec<u8>>, MapError> {
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut next = vec![0u8; self.key_size];
        loop {
            let prev = out.last().map(|k| k.as_slice());
            match sys::map_get_next_key(self.fd.as_fd(), prev, &mut next) {
                Ok(()) => out.push(next.clone()),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(out),
                Err(e) => return Err(MapError::Lookup(e)),
            }
        }
    }

    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

impl AsFd for RawMap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A BPF ring buffer map; read it with [`crate::ringbuf::RingBufReader`].
pub struct RingBuf {
    fd: OwnedFd,
    size: usize,
}

impl RingBuf {
    /// `size` must be the page size times a power of two.
    pub fn create(name: &str, size: usize) -> Result<RingBuf, MapError> {
        RingBuf::check_size(size)?;
        Ok(RingBuf { fd: create(BPF_MAP_TYPE_RINGBUF, 0, 0, size as u32, 0, name)?, size })
    }

    /// Whether `size` is one a ring can have: the page size times a power of two.
    pub fn check_size(size: usize) -> Result<(), MapError> {
        let page = udtrace_sys::mmap::page_size();
        if size < page || !size.is_multiple_of(page) || !(size / page).is_power_of_two() || size > u32::MAX as usize {
            return Err(MapError::RingSize { size, page });
        }
        Ok(())
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

impl AsFd for RingBuf {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_count("0-1\n"), Some(2));
        assert_eq!(parse_cpu_count("0"), Some(1));
        assert_eq!(parse_cpu_count("0-3,8-9"), Some(10));
        assert_eq!(parse_cpu_count("x"), None);
    }

    #[test]
    fn pod_round_trips() {
        let b = bytes_of(&0x0102_0304u32);
        assert_eq!(u32::read_from(&b), 0x0102_0304);
        assert_eq!(<[u8; 3]>::read_from(&bytes_of(&[1u8, 2, 3])), [1, 2, 3]);
    }

    #[test]
    fn ring_size_must_be_pages_times_power_of_two() {
        let page = udtrace_sys::mmap::page_size();
        assert!(matches!(RingBuf::create("r", page * 3), Err(MapError::RingSize { .. })));
        assert!(matches!(RingBuf::create("r", 100), Err(MapError::RingSize { .. })));
    }
}
