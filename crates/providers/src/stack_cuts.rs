//! User stacks unwound short of their outermost frame, counted as firings are consumed
//! and told at the end in one line per reason: udtrace never shortens a stack
//! silently. Counting only; the session prints the lines.

use std::collections::BTreeMap;

use udtrace_lang::capture::{MAX_USTACK_BYTES, USTACK_BYTES, USTACK_FRAMES};
use udtrace_object::unwind::Cut;

/// Firings whose user stacks lack their outer frames, by why.
#[derive(Debug, Default)]
pub struct StackCuts {
    /// Deeper than the bytes captured: how many, by the bytes captured.
    capture: BTreeMap<usize, u64>,
    /// Going on past the stack that could be read.
    unreadable: u64,
    /// In signal handlers on an alternate stack, ending at the interrupted
    /// instruction.
    alt_stack: u64,
}

impl StackCuts {
    /// One firing's stack, of which `bytes` were captured, was cut for `cut`.
    pub fn count(&mut self, cut: Cut, bytes: usize) {
        match cut {
            Cut::Capture => *self.capture.entry(bytes).or_default() += 1,
            Cut::Unreadable => self.unreadable += 1,
            Cut::AltStack => self.alt_stack += 1,
        }
    }

    /// The lines that say what was counted, one per reason.
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        let n: u64 = self.capture.values().sum();
        if n > 0 {
            let sizes: Vec<String> = self.capture.keys().map(usize::to_string).collect();
            let mut line = Stacks(n).say(&format!("deeper than the {} bytes of stack captured", sizes.join(" or ")));
            if self.capture.keys().any(|&b| b < MAX_USTACK_BYTES as usize) {
                let frames = u64::from(MAX_USTACK_BYTES).div_ceil(u64::from(USTACK_BYTES)) * USTACK_FRAMES;
                line += &format!(" (-x ustackframes={frames} captures {MAX_USTACK_BYTES} bytes)");
            }
            out.push(line);
        }
        if self.unreadable > 0 {
            out.push(Stacks(self.unreadable).say("deeper than the stack udtrace could read"));
        }
        if self.alt_stack > 0 {
            let n = self.alt_stack;
            let (s, end, their) = if n == 1 { ("", "ends", "its") } else { ("s", "end", "their") };
            out.push(format!(
                "{n} user stack{s} {end} at the instruction a signal interrupted: {their} handler{s} ran on an \
                 alternate signal stack, and the interrupted stack is not captured at a firing"
            ));
        }
        out
    }
}

/// A count of stacks, said in English.
struct Stacks(u64);

impl Stacks {
    /// `N user stacks were WHAT at their firings: their outer frames are missing`.
    fn say(&self, what: &str) -> String {
        let n = self.0;
        let (s, were, their) = if n == 1 { ("", "was", "its") } else { ("s", "were", "their") };
        format!("{n} user stack{s} {were} {what} at {their} firing{s}: {their} outer frames are missing")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_reason() {
        let mut c = StackCuts::default();
        assert!(c.notes().is_empty());
        c.count(Cut::Capture, 8192);
        assert_eq!(
            c.notes(),
            ["1 user stack was deeper than the 8192 bytes of stack captured at its firing: its outer frames \
              are missing (-x ustackframes=200 captures 16384 bytes)"]
        );
        c.count(Cut::Capture, 16384);
        c.count(Cut::Capture, 512);
        c.count(Cut::Unreadable, 4000);
        c.count(Cut::Unreadable, 4000);
        c.count(Cut::AltStack, 8192);
        assert_eq!(
            c.notes(),
            [
                "3 user stacks were deeper than the 512 or 8192 or 16384 bytes of stack captured at their \
                 firings: their outer frames are missing (-x ustackframes=200 captures 16384 bytes)",
                "2 user stacks were deeper than the stack udtrace could read at their firings: their outer \
                 frames are missing",
                "1 user stack ends at the instruction a signal interrupted: its handler ran on an alternate \
                 signal stack, and the interrupted stack is not captured at a firing",
            ]
        );
        // Only the most already: no hint.
        let mut c = StackCuts::default();
        c.count(Cut::Capture, 16384);
        assert_eq!(
            c.notes(),
            ["1 user stack was deeper than the 16384 bytes of stack captured at its firing: its outer frames \
              are missing"]
        );
    }
}
