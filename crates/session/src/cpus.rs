//! The machine's CPUs as `curcpu` describes them: the online CPUs, each with the
//! physical package it is on (DTrace's dt_conf_init reads the same files; it leaves
//! the processor set and locality group 0).

use udtrace_runtime::dmem::CpuInfo;

/// The CPU numbers of a sysfs CPU list such as `0-3,8,10-11`.
fn parse_cpu_list(text: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(lo), Ok(hi)) = (lo.trim().parse::<i32>(), hi.trim().parse::<i32>()) {
            out.extend(lo..=hi);
        }
    }
    out
}

/// The online CPUs; none when sysfs cannot say (every CPU then reads as its number).
pub fn online() -> Vec<CpuInfo> {
    let Ok(list) = std::fs::read_to_string("/sys/devices/system/cpu/online") else { return Vec::new() };
    parse_cpu_list(&list)
        .into_iter()
        .map(|id| {
            let chip = std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{id}/topology/physical_package_id"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            CpuInfo { id, chip, ..CpuInfo::default() }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_ranges_and_singles() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("0\n"), vec![0]);
        assert_eq!(parse_cpu_list(""), Vec::<i32>::new());
    }
}
