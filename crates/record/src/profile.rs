//! The layout of a profile sample's record: the record of a pid firing (registers
//! always: the interrupted thread's user registers; its user stack when clauses unwind
//! it) followed by the interrupted kernel PC and the task's name.
//!
//! ```text
//! offset  size  field
//!      0     R  a pid record (crate::pid) whose cookie is PROFILE_COOKIE | probe index
//!      R     8  the kernel PC when the CPU was in kernel mode, else 0
//!    R+8    16  the task's name (`comm`), NUL-padded
//! ```

use crate::pid::{Firing, PlanError, RecordError, RecordLayout, RecordPlan, OFF_COOKIE};

/// Set in the cookie of every profile record (pid cookies are small, proc ones have
/// bit 62).
pub const PROFILE_COOKIE: u64 = 1 << 61;

/// Bytes of a task's name.
pub const COMM_LEN: usize = 16;

/// Offsets of a profile record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileLayout {
    pub base: RecordLayout,
    pub off_kernel_pc: usize,
    pub off_comm: usize,
    pub size: usize,
}

/// One sample.
pub struct Sample<'a> {
    /// The interrupted thread, its user registers and stack.
    pub firing: Firing<'a>,
    /// Which profile probe (the index its program was given).
    pub probe: u32,
    /// 0 when the thread ran in user mode.
    pub kernel_pc: u64,
    /// The task's name, without its NULs.
    pub comm: &'a [u8],
}

impl ProfileLayout {
    /// A layout with `stack_bytes` of user stack (a multiple of 8, as for pid records).
    pub fn new(stack_bytes: u32) -> Result<ProfileLayout, PlanError> {
        let plan = RecordPlan { stack_bytes, regs: true, ..RecordPlan::default() };
        let base = RecordLayout::new(&plan)?;
        let off_kernel_pc = base.size;
        let off_comm = off_kernel_pc + 8;
        let size = off_comm + COMM_LEN;
        Ok(ProfileLayout { base, off_kernel_pc, off_comm, size })
    }

    pub fn parse<'a>(&self, rec: &'a [u8]) -> Result<Sample<'a>, RecordError> {
        if rec.len() != self.size {
            return Err(RecordError::Size { got: rec.len(), want: self.size });
        }
        let firing = self.base.parse(&rec[..self.base.size])?;
        let kernel_pc = u64::from_ne_bytes(rec[self.off_kernel_pc..self.off_comm].try_into().expect("8 bytes"));
        let comm = &rec[self.off_comm..self.size];
        let comm = &comm[..comm.iter().position(|&c| c == 0).unwrap_or(COMM_LEN)];
        Ok(Sample { probe: (firing.cookie & 0xffff_ffff) as u32, firing, kernel_pc, comm })
    }
}

/// Whether a record from a shared ring is a profile sample.
pub fn is_profile(rec: &[u8]) -> bool {
    let cookie = rec.get(OFF_COOKIE..OFF_COOKIE + 8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes);
    cookie.is_some_and(|c| c & PROFILE_COOKIE != 0 && c & crate::proc::PROC_COOKIE == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pid::{OFF_PID_TGID, OFF_REGS, OFF_STACK_LEN};

    #[test]
    fn a_sample_reads_back() {
        let l = ProfileLayout::new(16).unwrap();
        let mut rec = vec![0u8; l.size];
        rec[..8].copy_from_slice(&(PROFILE_COOKIE | 3).to_ne_bytes());
        rec[OFF_PID_TGID..OFF_PID_TGID + 8].copy_from_slice(&(42u64 << 32 | 43).to_ne_bytes());
        rec[OFF_REGS + 16 * 8..OFF_REGS + 17 * 8].copy_from_slice(&0x401000u64.to_ne_bytes());
        rec[OFF_STACK_LEN..OFF_STACK_LEN + 4].copy_from_slice(&8u32.to_ne_bytes());
        rec[l.off_kernel_pc..l.off_kernel_pc + 8].copy_from_slice(&0xffff_ffff_8100_0000u64.to_ne_bytes());
        rec[l.off_comm..l.off_comm + 4].copy_from_slice(b"busy");
        assert!(is_profile(&rec));
        let s = l.parse(&rec).unwrap();
        assert_eq!((s.probe, s.firing.pid, s.firing.tid), (3, 42, 43));
        assert_eq!(s.firing.reg(crate::pid::PtReg::Ip), 0x401000);
        assert_eq!(s.firing.stack.len(), 8);
        assert_eq!(s.kernel_pc, 0xffff_ffff_8100_0000);
        assert_eq!(s.comm, b"busy");
        assert!(l.parse(&rec[1..]).is_err());
        rec[..8].copy_from_slice(&1u64.to_ne_bytes());
        assert!(!is_profile(&rec));
    }
}
