//! Statically defined probes (USDT): the `.note.stapsdt` probes objects carry, named
//! as DTrace names them, `provider<pid>:module:function:name` (`postgresql123:postgres:
//! exec_simple_query:query-start`): module and function as for pid probes (the object
//! and the function holding the site), `__` in a note's name as `-`. Their sites are
//! kept as pid probes' are ([`SiteKind::Usdt`]), so that following, exec, dlopen and
//! arming are the pid provider's; what differs is the arguments, decoded from each
//! site's descriptors ([`UsdtSite::arg`]), and the semaphore raised while a probe is
//! armed ([`crate::pid::PidProbe::semaphore`]). See docs/usdt.md.

use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

use udtrace_dif::op::UREG_IP;
use udtrace_lang::ast::ProbeDesc;
use udtrace_lang::firing::{URegPart, UsdtAt, UsdtLoc, UsdtSiteArgs};
use udtrace_lang::Tag;
use udtrace_object::modules;
use udtrace_object::symbols::Function;
use udtrace_object::usdt::{dtrace_name, Operand, Reg, RegPart, UsdtArg};
use udtrace_process::procfs::{self, LoadedObject};
use udtrace_process::refusal;
use udtrace_record::pid::PtReg;
use udtrace_runtime::Probe;

use crate::glob;
use crate::pid::{DescError, PidProvider, SiteKind};

/// Per argument of a site, the register it is in when it is a whole 64-bit one (a
/// pointer a string capture can read behind at the firing).
pub fn whole_regs(args: &Result<Vec<UsdtArg>, String>) -> Vec<Option<PtReg>> {
    let Ok(args) = args else { return Vec::new() };
    args.iter()
        .map(|a| match &a.operand {
            Operand::Reg(p) if p.width == 8 => Some(crate::pid_context::usdt_reg(p.reg)),
            _ => None,
        })
        .collect()
}

/// What one USDT site's firing needs to decode its arguments.
#[derive(Debug, Clone)]
pub struct UsdtSite {
    /// The arguments, or the descriptor udtrace cannot read.
    pub args: Result<Vec<UsdtArg>, String>,
    /// The site's address in its file: the distance to the firing's pc is the
    /// object's load bias (for `symbol(%rip)` arguments).
    pub vaddr: u64,
    /// Per argument, the address in the file of the symbol its operand names.
    pub symbols: Vec<Option<u64>>,
}

impl UsdtSite {
    /// Argument `n` at a firing: `reg` reads a register, `read` the process's memory.
    /// 0 for an argument the site does not have, or whose memory cannot be read (as
    /// DTrace's, which faults and reads 0).
    pub fn arg(&self, n: usize, reg: impl Fn(Reg) -> u64, read: impl Fn(u64, usize) -> Option<Vec<u8>>) -> u64 {
        let Some(a) = self.args.as_ref().ok().and_then(|a| a.get(n)) else { return 0 };
        let part = |p: &RegPart| p.value(reg(p.reg));
        let raw = match &a.operand {
            Operand::Const(c) => *c as u64,
            Operand::Reg(p) => part(p),
            Operand::Mem { disp, symbol, base, index, scale } => {
                let mut addr = *disp as u64;
                match (symbol, self.symbols.get(n).copied().flatten()) {
                    // `sym(%rip)`: the symbol where the object is loaded.
                    (Some(_), Some(at)) => {
                        addr = addr.wrapping_add(at).wrapping_add(reg(Reg::Ip).wrapping_sub(self.vaddr))
                    }
                    (Some(_), None) => return 0,
                    (None, _) => {
                        if let Some(b) = base {
                            addr = addr.wrapping_add(part(b));
                        }
                    }
                }
                if let Some(i) = index {
                    addr = addr.wrapping_add(part(i).wrapping_mul(u64::from(*scale)));
                }
                let Some(bytes) = read(addr, usize::from(a.size)) else { return 0 };
                let mut word = [0u8; 8];
                word[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
                u64::from_le_bytes(word)
            }
        };
        a.extend(raw)
    }
}

impl UsdtSite {
    /// Its arguments as a program at the firing reads them, decoding them as
    /// [`UsdtSite::arg`] does: a `sym(%rip)` operand is rip plus the symbol's distance
    /// from the site.
    pub fn firing_args(&self) -> UsdtSiteArgs {
        let part = |p: &RegPart| URegPart { reg: ureg(p.reg), width: p.width, high: p.high };
        let args = self.args.as_ref().map_or_else(
            |_| Vec::new(),
            |args| {
                args.iter()
                    .enumerate()
                    .map(|(n, a)| {
                        let at = match &a.operand {
                            Operand::Const(c) => UsdtAt::Const(*c as u64),
                            Operand::Reg(p) => UsdtAt::Reg(part(p)),
                            Operand::Mem { disp, symbol, base, index, scale } => {
                                let index = index.as_ref().map(part);
                                match (symbol, self.symbols.get(n).copied().flatten()) {
                                    (Some(_), Some(sym)) => UsdtAt::Mem {
                                        base: Some(URegPart { reg: UREG_IP, width: 8, high: false }),
                                        index,
                                        scale: *scale,
                                        disp: (*disp as u64).wrapping_add(sym).wrapping_sub(self.vaddr),
                                    },
                                    // An unresolved symbol reads 0, before extension.
                                    (Some(_), None) => UsdtAt::Const(0),
                                    (None, _) => UsdtAt::Mem {
                                        base: base.as_ref().map(part),
                                        index,
                                        scale: *scale,
                                        disp: *disp as u64,
                                    },
                                }
                            }
                        };
                        UsdtLoc { size: a.size, signed: a.signed, at }
                    })
                    .collect()
            },
        );
        UsdtSiteArgs { vaddr: self.vaddr, args }
    }
}

/// A register's number in `udtrace_dif::op::USER_REGS`.
fn ureg(r: Reg) -> u8 {
    match r {
        Reg::Ax => 0,
        Reg::Bx => 1,
        Reg::Cx => 2,
        Reg::Dx => 3,
        Reg::Si => 4,
        Reg::Di => 5,
        Reg::Bp => 6,
        Reg::Sp => 7,
        Reg::R8 => 8,
        Reg::R9 => 9,
        Reg::R10 => 10,
        Reg::R11 => 11,
        Reg::R12 => 12,
        Reg::R13 => 13,
        Reg::R14 => 14,
        Reg::R15 => 15,
        Reg::Ip => UREG_IP,
    }
}

/// The USDT sites of every probe made, and the (provider, name) each [`SiteKind::Usdt`]
/// number stands for.
#[derive(Debug, Default)]
pub struct UsdtSites {
    kinds: Vec<(String, String)>,
    sites: HashMap<(u32, u64), Rc<UsdtSite>>,
}

impl UsdtSites {
    /// The provider (without its pid) of USDT kind `k`.
    pub fn provider(&self, k: u32) -> &str {
        self.kinds.get(k as usize).map_or("usdt", |(p, _)| p.as_str())
    }

    fn kind(&mut self, provider: &str, name: &str) -> u32 {
        if let Some(i) = self.kinds.iter().position(|(p, n)| p == provider && n == name) {
            return i as u32;
        }
        self.kinds.push((provider.to_string(), name.to_string()));
        (self.kinds.len() - 1) as u32
    }

    /// The site of probe `probe_id` at `offset` in its function.
    pub fn site(&self, probe_id: u32, offset: u64) -> Option<Rc<UsdtSite>> {
        self.sites.get(&(probe_id, offset)).cloned()
    }

    /// The C types of a probe's arguments (`-lv`), from any of its sites.
    pub fn arg_types(&self, probe_id: u32) -> Option<Vec<&'static str>> {
        let (_, s) = self.sites.iter().find(|((id, _), _)| *id == probe_id)?;
        s.args.as_ref().ok().map(|a| a.iter().map(UsdtArg::c_type).collect())
    }
}

/// The provider glob and process a USDT provider field names: `postgresql123` →
/// (`postgresql`, 123). Not one when the field names the pid provider (`pid123`,
/// `p*d123`) or no process.
pub fn provider_process(provider: &str) -> Option<(String, i32)> {
    let digits = provider.bytes().rev().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits == provider.len() {
        return None;
    }
    let pid = provider[provider.len() - digits..].parse::<i32>().ok().filter(|&p| p > 0)?;
    if glob::matches(provider, &format!("pid{pid}")) {
        return None;
    }
    Some((provider[..provider.len() - digits].to_string(), pid))
}

/// A USDT provider glob of every process, as `pid*` is the pid provider's
/// (`python*`): a glob without a pid at its end, whose literal start names no other
/// provider (`p*` could be `pid`, `proc` or `profile`: not this).
pub fn all_processes_provider(provider: &str) -> Option<String> {
    if !glob::is_glob(provider) || provider.ends_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let literal = &provider[..provider.find(['*', '?', '[', '\\']).unwrap_or(provider.len())];
    let other = ["pid", "proc", "profile", "dtrace"].iter().any(|p| p.starts_with(literal) || literal.starts_with(p));
    (!literal.is_empty() && !other).then(|| provider.to_string())
}

impl PidProvider {
    /// The probes a USDT description of one process, or of every process, names;
    /// `Ok(None)`: not a USDT description.
    pub fn matching_usdt(&mut self, d: &ProbeDesc, next_id: &mut u32) -> Result<Option<Vec<Rc<Probe>>>, DescError> {
        if let Some(provider) = all_processes_provider(&d.provider) {
            return Ok(Some(self.matching_usdt_all(d, &provider, next_id)));
        }
        let Some((provider, pid)) = provider_process(&d.provider) else { return Ok(None) };
        let grab = |why: refusal::Refusal| (Tag::D_PROC_GRAB, format!("failed to grab process {pid}: {why}"));
        refusal::check_proc().map_err(grab)?;
        let objects = procfs::objects_of(pid).map_err(|e| grab(refusal::unreadable(pid, &e)))?;
        Ok(Some(self.match_usdt(d, &provider, pid, pid, &objects, next_id)))
    }

    /// Why a USDT description of process `pid` matched nothing, when no object of the
    /// process has a probe of `provider` at all.
    pub(crate) fn why_no_usdt(&mut self, provider: &str, pid: i32) -> Option<String> {
        let objects = procfs::objects_of(pid).ok()?;
        let mut providers: Vec<String> = Vec::new();
        for obj in objects.iter().filter(|o| !o.is_vdso && !o.deleted) {
            let Ok(loaded) = self.load(&procfs::host_path(pid, &obj.path)) else { continue };
            for n in &loaded.info.usdt {
                if glob::matches(provider, &n.provider) {
                    return None;
                }
                if !providers.contains(&n.provider) {
                    providers.push(n.provider.clone());
                }
            }
        }
        Some(match providers.is_empty() {
            true => format!("no object process {pid} maps has USDT probes (.note.stapsdt)"),
            false => {
                format!("the objects process {pid} maps have USDT probes of provider {} only", providers.join(", "))
            }
        })
    }

    /// A `provider*` description: its probes in every object of every process now
    /// running (each file once), owned by no process (pid 0), as `pid*`'s.
    fn matching_usdt_all(&mut self, d: &ProbeDesc, provider: &str, next_id: &mut u32) -> Vec<Rc<Probe>> {
        let me = std::process::id() as i32;
        let mut out = Vec::new();
        let mut done = std::collections::HashSet::new();
        for pid in procfs::all_pids().unwrap_or_default().into_iter().filter(|&p| p != me) {
            let Ok(objects) = procfs::objects_of(pid) else { continue };
            for obj in objects.into_iter().filter(|o| !o.is_vdso) {
                let key = (procfs::host_path(pid, &obj.path), obj.is_main);
                if done.insert(key.clone()) {
                    self.all_files.insert(key);
                    out.extend(self.match_usdt(d, provider, 0, pid, std::slice::from_ref(&obj), next_id));
                }
            }
        }
        out
    }

    /// Whether probe `id` is a pid or USDT probe (its sites a backend arms).
    pub fn owns(&self, id: u32) -> bool {
        self.ids.contains(&id)
    }

    /// The USDT site of a firing of probe `probe_id` at `offset` in its function.
    pub fn usdt_site(&self, probe_id: u32, offset: u64) -> Option<Rc<UsdtSite>> {
        self.usdt.site(probe_id, offset)
    }

    /// Whether an argument of a site of `probes` is in memory relative to the stack or
    /// frame pointer (`-4@112(%rsp)`, `8@-16(%rbp)`): the record carries the stack.
    pub fn usdt_reads_stack(&self, probes: impl Iterator<Item = u32>) -> bool {
        let ids: std::collections::HashSet<u32> = probes.collect();
        let on_stack = |p: &Option<RegPart>| p.is_some_and(|p| matches!(p.reg, Reg::Sp | Reg::Bp));
        self.usdt.sites.iter().filter(|((id, _), _)| ids.contains(id)).any(|(_, site)| {
            site.args.as_ref().is_ok_and(|args| {
                args.iter().any(
                    |a| matches!(&a.operand, Operand::Mem { base, index, .. } if on_stack(base) || on_stack(index)),
                )
            })
        })
    }

    /// Where the arguments of USDT probe `probe_id` are at each of its sites, for its
    /// programs at the firing (`ProbeFacts::usdt`); `None`: not a USDT probe.
    pub fn usdt_site_args(&self, probe_id: u32) -> Option<Vec<UsdtSiteArgs>> {
        let mut sites: Vec<(u64, &Rc<UsdtSite>)> =
            self.usdt.sites.iter().filter(|((id, _), _)| *id == probe_id).map(|((_, off), s)| (*off, s)).collect();
        if sites.is_empty() {
            return None;
        }
        sites.sort_by_key(|(off, _)| *off);
        Some(sites.iter().map(|(_, s)| s.firing_args()).collect())
    }

    /// The C types of a USDT probe's arguments, for `-lv`.
    pub fn usdt_arg_types(&self, probe_id: u32) -> Option<Vec<&'static str>> {
        self.usdt.arg_types(probe_id)
    }

    /// Probes of `<provider><owner>` in `objects` of process `pid`. What an object
    /// lacks is no error: the description may match elsewhere.
    pub(crate) fn match_usdt(
        &mut self,
        d: &ProbeDesc,
        provider: &str,
        owner: i32,
        pid: i32,
        objects: &[LoadedObject],
        next_id: &mut u32,
    ) -> Vec<Rc<Probe>> {
        let any = |f: &str| if f.is_empty() { "*".to_string() } else { f.to_string() };
        let (module, func, name) = (any(&d.module), any(&d.function), any(&d.name));
        let mut out = Vec::new();
        for obj in objects.iter().filter(|o| !o.is_vdso && !o.deleted) {
            if !modules::module_matches(&module, &obj.path, obj.is_main) {
                continue;
            }
            let file: PathBuf = procfs::host_path(pid, &obj.path);
            let Ok(loaded) = self.load(&file) else { continue };
            let modname = modules::module_name(&obj.path).to_string();
            for note in &loaded.info.usdt {
                let probe_name = dtrace_name(&note.name);
                if !glob::matches(provider, &note.provider) || !glob::matches(&name, &probe_name) {
                    continue;
                }
                // The function holding the site; a site outside every function stands
                // for itself, as an absolute pid probe does.
                let f = match loaded.table().lookup(note.pc) {
                    Some((f, _)) => f.clone(),
                    None => Function {
                        name: "-".into(),
                        mangled: None,
                        aliases: Vec::new(),
                        addr: note.pc,
                        size: 1,
                        ifunc: false,
                    },
                };
                if !glob::matches(&func, &f.name) {
                    continue;
                }
                let Some(file_off) = loaded.file_offset(note.pc) else { continue };
                let off = note.pc - f.addr;
                let code = loaded.code(&f);
                let code = code.as_deref().unwrap_or(&[]);
                let k = self.usdt.kind(&note.provider, &probe_name);
                let probe = self.add(owner, &file, &modname, &f, SiteKind::Usdt(k), probe_name, vec![], code, next_id);
                let i = self.index[&(owner, file.clone(), f.addr, SiteKind::Usdt(k))];
                let p = &mut self.probes[i];
                if !p.sites.iter().any(|&(o, _)| o == off) {
                    p.sites.push((off, file_off));
                }
                if note.semaphore != 0 {
                    p.semaphore = loaded.info.vaddr_to_offset(note.semaphore).unwrap_or(0);
                }
                let symbols = match &note.args {
                    Ok(args) => args
                        .iter()
                        .map(|a| match &a.operand {
                            Operand::Mem { symbol: Some(s), .. } => {
                                loaded.info.symbols.iter().find(|x| x.defined && &x.name == s).map(|x| x.addr)
                            }
                            _ => None,
                        })
                        .collect(),
                    Err(_) => Vec::new(),
                };
                if !p.usdt_regs.iter().any(|&(o, _)| o == off) {
                    p.usdt_regs.push((off, whole_regs(&note.args)));
                }
                let site = UsdtSite { args: note.args.clone(), vaddr: note.pc, symbols };
                self.usdt.sites.insert((probe.id, off), Rc::new(site));
                if !out.iter().any(|o: &Rc<Probe>| o.id == probe.id) {
                    out.push(probe);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use udtrace_object::usdt::parse_args;

    #[test]
    fn provider_fields() {
        assert_eq!(provider_process("postgresql123"), Some(("postgresql".into(), 123)));
        assert_eq!(provider_process("python*42"), Some(("python*".into(), 42)));
        assert_eq!(provider_process("pid123"), None, "the pid provider");
        assert_eq!(provider_process("p*d123"), None, "matches pid123");
        assert_eq!(provider_process("python"), None);
        assert_eq!(provider_process("123"), None);
        assert_eq!(provider_process("python0"), None);
        assert_eq!(all_processes_provider("python*"), Some("python*".into()));
        assert_eq!(all_processes_provider("postgres*"), Some("postgres*".into()));
        assert_eq!(all_processes_provider("pid*"), None, "the pid provider's");
        assert_eq!(all_processes_provider("p*"), None, "could be pid, proc or profile");
        assert_eq!(all_processes_provider("*"), None);
        assert_eq!(all_processes_provider("python"), None, "no glob: a static provider's name");
        assert_eq!(all_processes_provider("python*1"), None, "one process");
    }

    #[test]
    fn arguments_decode() {
        let site = UsdtSite {
            args: parse_args("-4@%eax 8@-16(%rbp) 8@8(%rax,%rdx,8) $5 -1@%dil 4@sym+4(%rip) 2@%ah"),
            vaddr: 0x1000,
            symbols: vec![None, None, None, None, None, Some(0x3000), None],
        };
        let reg = |r: Reg| match r {
            Reg::Ax => 0x1_ffff_fffe,
            Reg::Bp => 0x7000,
            Reg::Dx => 2,
            Reg::Di => 0x80,
            Reg::Ip => 0x5000_1000,
            _ => 0,
        };
        let read = |addr: u64, len: usize| {
            let v: u64 = match addr {
                0x6ff0 => 0x1122_3344_5566_7788,
                // 0x1_ffff_fffe + 8 + 2 * 8
                0x2_0000_0016 => 42,
                0x5000_3004 => 0xdead_beef,
                _ => return None,
            };
            Some(v.to_le_bytes()[..len].to_vec())
        };
        let args: Vec<u64> = (0..8).map(|n| site.arg(n, reg, read)).collect();
        assert_eq!(args, vec![(-2i64) as u64, 0x1122_3344_5566_7788, 42, 5, (-128i64) as u64, 0xdead_beef, 0xff, 0]);
    }
}
