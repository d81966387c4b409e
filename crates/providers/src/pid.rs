//! The pid provider's probes: `pid<N>:<module>:<function>:<name>` matched against
//! what process N has mapped, as DTrace's dt_pid.c matches them (and with its
//! messages). Each probe keeps the file offsets of its sites, for the backend.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use udtrace_lang::ast::ProbeDesc;
use udtrace_lang::Tag;
use udtrace_object::debuginfo::{self, AddressError, LoadError, ObjectSymbols};
use udtrace_object::errno::{self, ErrnoTls};
use udtrace_object::modules;
use udtrace_object::patch;
use udtrace_object::sites::{self, Sites};
use udtrace_object::symbols::Function;
use udtrace_process::procfs::{self, LoadedObject};
use udtrace_process::refusal;
use udtrace_record::pid::PtReg;
use udtrace_runtime::Probe;

use crate::glob;

/// What kind of site a pid probe has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SiteKind {
    Entry,
    /// Every return site; `arg0` is the site's offset in the function.
    Return,
    Offset(u64),
    /// Not a site: a `profile-N` sample (`arg0` the kernel PC, `arg1` the user PC).
    Profile,
    /// A statically defined probe's site (USDT, [`crate::usdt`]): its arguments come
    /// from the note's descriptors. The number tells probes of one function apart.
    Usdt(u32),
}

/// One pid probe with everything the backend needs to arm it.
#[derive(Debug, Clone)]
pub struct PidProbe {
    pub probe: Rc<Probe>,
    pub pid: i32,
    /// The object as udtrace can open it (through /proc/<pid>/root).
    pub file: PathBuf,
    pub kind: SiteKind,
    /// The function's address in the file's virtual address space.
    pub func_vaddr: u64,
    /// The function's size in bytes (an in-process backend decodes it whole).
    pub func_size: u64,
    /// (offset in the function, offset in the file) of each site the kernel can probe.
    pub sites: Vec<(u64, u64)>,
    /// (offset in the function, offset in the file) of each site whose instruction the
    /// kernel refuses to probe (`lock`-prefixed, VEX/EVEX): only an in-process backend
    /// can arm them, and a backend reports those it does not arm as refused.
    pub unprobeable: Vec<(u64, u64)>,
    /// A USDT probe's semaphore: its offset in the file (0: none), raised in each
    /// process while the probe is armed there.
    pub semaphore: u64,
    /// A USDT probe's sites: (offset in the function, per argument the register it is
    /// in when it is a whole 64-bit one), for [`PidProbe::string_regs`].
    pub usdt_regs: Vec<(u64, Vec<Option<PtReg>>)>,
}

impl PidProbe {
    /// The register each string capture of `codes` ([`crate::backend::string_reg`])
    /// reads at this probe's site at `offset`, `None` for none: a USDT argument's
    /// ([`crate::backend::USDT_STRING`]) is the register the site has it in, none when
    /// it has it elsewhere (memory, part of a register) or the site is no USDT one, or
    /// when another capture already reads that register (the consumer finds a string
    /// by its address, whichever slot holds it).
    pub fn string_regs(&self, offset: u64, codes: &[u8]) -> Vec<Option<PtReg>> {
        use crate::backend::{string_reg, USDT_STRING};
        let args = self.usdt_regs.iter().find(|(o, _)| *o == offset).map(|(_, a)| a.as_slice());
        let fixed: Vec<PtReg> = codes.iter().filter(|&&c| c < USDT_STRING).map(|&c| string_reg(c)).collect();
        let mut out: Vec<Option<PtReg>> = Vec::with_capacity(codes.len());
        for &c in codes {
            let r = match c.checked_sub(USDT_STRING) {
                None => Some(string_reg(c)),
                Some(n) => args
                    .and_then(|a| a.get(usize::from(n)).copied().flatten())
                    .filter(|r| !fixed.contains(r) && !out.contains(&Some(*r))),
            };
            out.push(r);
        }
        out
    }
}

#[derive(Default)]
pub struct PidProvider {
    pub(crate) objects: HashMap<PathBuf, Rc<ObjectSymbols>>,
    pub(crate) probes: Vec<PidProbe>,
    /// (pid, file, function address, kind) → index in `probes`: one probe each.
    pub(crate) index: HashMap<(i32, PathBuf, u64, SiteKind), usize>,
    /// USDT: what each site's firing means (see [`crate::usdt`]).
    pub(crate) usdt: crate::usdt::UsdtSites,
    /// The ids of `probes`.
    pub(crate) ids: HashSet<u32>,
    /// (file, is the executable) of every object `pid*` descriptions were matched in.
    pub all_files: HashSet<(PathBuf, bool)>,
    /// Dynamic loaders found deleted (see [`PidProvider::first_deleted_loader`]).
    deleted_loaders: HashSet<String>,
}

/// Whether a provider glob names every process (`pid*`): probes of owner 0. A
/// provider that ends in digits names one process, glob or not (`p*d123`).
pub fn is_all_processes(provider: &str) -> bool {
    provider.starts_with("pid") && glob::is_glob(provider) && !provider.ends_with(|c: char| c.is_ascii_digit())
}

/// Why a pid description cannot be matched: DTrace's tag and message.
pub type DescError = (Tag, String);

/// Whether a provider field names pid probes: one process's or every process's.
pub fn is_pid_provider(provider: &str) -> bool {
    is_all_processes(provider) || provider_pid(provider).ok().flatten().is_some()
}

/// The process a pid or USDT provider field names (`pid123`, `p*d123`,
/// `postgresql123`), if it names one.
pub fn named_process(provider: &str) -> Option<i32> {
    provider_pid(provider).ok().flatten().or_else(|| crate::usdt::provider_process(provider).map(|(_, p)| p))
}

/// Whether a provider field names USDT probes of one process (`postgresql123`).
pub fn is_usdt_provider(provider: &str) -> bool {
    crate::usdt::provider_process(provider).is_some() || is_all_usdt(provider)
}

/// Whether a provider field names USDT probes of every process (`python*`).
pub fn is_all_usdt(provider: &str) -> bool {
    crate::usdt::all_processes_provider(provider).is_some()
}

/// Whether a provider field names probes in processes: pid or USDT ones.
pub fn is_process_provider(provider: &str) -> bool {
    is_pid_provider(provider) || is_usdt_provider(provider)
}

/// Parses the provider field as dt_pid.c does: a provider that ends in digits names
/// process N by them, and is the pid provider when `pid<N>` matches it (`pid123`,
/// `p*d123`). `Ok(None)`: not the pid provider (the description is matched against
/// the other providers' probes, and may match none).
fn provider_pid(provider: &str) -> Result<Option<i32>, DescError> {
    if provider == "pid0" {
        return Err((Tag::D_PROC_BADPID, "pid0 does not contain a valid pid".into()));
    }
    let digits = provider.bytes().rev().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Ok(None);
    }
    if digits == provider.len() {
        return Err((Tag::D_PROC_BADPROV, format!("'{provider}' is not a valid provider")));
    }
    let pid = match provider[provider.len() - digits..].parse::<i32>() {
        Ok(p) if p > 0 => p,
        _ => return Err((Tag::D_PROC_BADPID, format!("'{provider}' does not contain a valid pid"))),
    };
    Ok(glob::matches(provider, &format!("pid{pid}")).then_some(pid))
}

/// Whether the kernel can probe the instruction at offset `off` of a function's `code`.
fn probeable_at(code: &[u8], off: u64, vaddr: u64) -> bool {
    let code = usize::try_from(off).ok().and_then(|o| code.get(o..)).unwrap_or(&[]);
    sites::probeable(&code[..code.len().min(16)], vaddr)
}

impl PidProvider {
    pub fn probes(&self) -> &[PidProbe] {
        &self.probes
    }

    /// Of the sites of the probes `ids`, how many an in-process backend could not patch
    /// (each probe taken alone), by reason; and how many sites there are in all.
    pub fn patch_refusals(&self, ids: &HashSet<u32>) -> (usize, BTreeMap<String, usize>) {
        let mut refusals: BTreeMap<String, usize> = BTreeMap::new();
        let mut total = 0;
        for p in self.probes.iter().filter(|p| ids.contains(&p.probe.id)) {
            let Some(obj) = self.objects.get(&p.file) else { continue };
            for &(offset, file_off) in &p.sites {
                total += 1;
                let start = file_off.saturating_sub(offset);
                let code = usize::try_from(p.func_size).ok().and_then(|n| obj.bytes(start, n));
                let code = code.as_deref();
                let kind = match p.kind {
                    SiteKind::Entry => patch::SiteKind::Entry,
                    SiteKind::Return => patch::SiteKind::Return,
                    SiteKind::Offset(_) | SiteKind::Usdt(_) => patch::SiteKind::Offset,
                    SiteKind::Profile => continue,
                };
                let refusal = match code {
                    Some(code) => patch::plan(code, p.func_vaddr, offset, kind).err().map(|e| e.summary().to_string()),
                    None => Some("its function is not in its file".to_string()),
                };
                if let Some(why) = refusal {
                    *refusals.entry(why).or_default() += 1;
                }
            }
        }
        (total, refusals)
    }

    /// Of the pid probes `ids`, those in a file Go's toolchain linked where a function's
    /// arguments come in (entry or offset, not a return or USDT): `argN` there are the C
    /// ABI's registers, which Go functions do not take their arguments in.
    pub fn go_argument_probes<'a>(&'a self, ids: &'a HashSet<u32>) -> impl Iterator<Item = &'a Probe> + 'a {
        self.probes
            .iter()
            .filter(|p| ids.contains(&p.probe.id) && matches!(p.kind, SiteKind::Entry | SiteKind::Offset(_)))
            .filter(|p| self.objects.get(&p.file).is_some_and(|o| o.info.go))
            .map(|p| &*p.probe)
    }

    /// The objects loaded while matching, by the path udtrace opened them with.
    pub fn objects(&self) -> &HashMap<PathBuf, Rc<ObjectSymbols>> {
        &self.objects
    }

    /// Where the loader hook goes in the dynamic loader `file`: the file offset of
    /// `_dl_debug_state`, and the distance from it to `_r_debug.r_state` in memory (0 when
    /// the loader has no `_r_debug`).
    pub fn loader_hook(&mut self, file: &PathBuf) -> Option<(u64, u64)> {
        let l = self.load(file).ok()?;
        let addr = l.matching("_dl_debug_state").first()?.addr;
        let r_debug = l.info.symbols.iter().find(|s| s.defined && s.name == "_r_debug").map(|s| s.addr);
        // struct r_debug { int r_version; struct link_map *r_map; ElfW(Addr) r_brk;
        // enum r_state; ... }: r_state at 24 on x86-64.
        // Wrapping: the symbol's value is the file's, which may lie.
        let delta = r_debug.map_or(0, |r| r.wrapping_add(24).wrapping_sub(addr));
        Some((l.file_offset(addr)?, delta))
    }

    /// Whether the dynamic loader at `path`, deleted since it was mapped, is seen for
    /// the first time: every process of a daemon maps the same one, and one word of
    /// it is enough.
    pub fn first_deleted_loader(&mut self, path: &str) -> bool {
        self.deleted_loaders.insert(path.to_string())
    }

    pub(crate) fn load(&mut self, file: &PathBuf) -> Result<Rc<ObjectSymbols>, LoadError> {
        self.load_as(file, file)
    }

    /// Object `obj` of process `pid` as it is mapped (a deleted file through map_files),
    /// read once for every process that maps it.
    fn load_mapped(&mut self, pid: i32, obj: &LoadedObject) -> Result<Rc<ObjectSymbols>, LoadError> {
        self.load_as(&procfs::object_key(pid, obj), &procfs::object_file(pid, obj))
    }

    /// The object read from `file`, kept under `key`.
    fn load_as(&mut self, key: &PathBuf, file: &Path) -> Result<Rc<ObjectSymbols>, LoadError> {
        if let Some(l) = self.objects.get(key) {
            return Ok(Rc::clone(l));
        }
        let l = Rc::new(debuginfo::load(file)?);
        self.objects.insert(key.clone(), Rc::clone(&l));
        Ok(l)
    }

    /// Where process `pid` (with `objects` mapped) keeps errno, from the code of its
    /// `__errno_location`: (the address of the GOT slot holding errno's TLS offset, 0)
    /// or (0, the offset). libc's; the executable's when there is no dynamic loader (a
    /// static program). `None` until libc is mapped, or where the code is not glibc's.
    pub fn errno_tls(&mut self, pid: i32, objects: &[LoadedObject]) -> Option<(u64, i64)> {
        let named =
            |prefix: &str| objects.iter().find(|o| !o.is_vdso && modules::module_name(&o.path).starts_with(prefix));
        let obj = match named("libc.so") {
            Some(libc) => libc,
            None if named("ld-").is_none() => objects.iter().find(|o| o.is_main)?,
            None => return None,
        };
        let syms = self.load_mapped(pid, obj).ok()?;
        let f = syms.matching("__errno_location").first().copied()?.clone();
        let bias = obj.bias(&syms.info)?;
        match errno::locate(&syms.code(&f)?, f.addr)? {
            ErrnoTls::GotSlot(vaddr) => Some((bias.wrapping_add(vaddr), 0)),
            ErrnoTls::Offset(off) => Some((0, off)),
        }
    }

    /// Creates (or finds) the probes a description names. `next_id` numbers new probes.
    /// `Ok(None)`: the description is not for the pid provider.
    pub fn matching(&mut self, d: &ProbeDesc, next_id: &mut u32) -> Result<Option<Vec<Rc<Probe>>>, DescError> {
        let Some(pid) = provider_pid(&d.provider)? else { return Ok(None) };
        let grab = |why: refusal::Refusal| (Tag::D_PROC_GRAB, format!("failed to grab process {pid}: {why}"));
        // A /proc of another PID namespace would show another process than pid N.
        refusal::check_proc().map_err(grab)?;
        let objects = procfs::objects_of(pid).map_err(|e| grab(refusal::unreadable(pid, &e)))?;
        if d.function == "-" {
            let name = if d.name.is_empty() { "*" } else { d.name.as_str() };
            return self.absolute(pid, &d.module, name, &objects, next_id).map(Some);
        }
        self.match_objects(d, pid, pid, &objects, true, next_id).map(Some)
    }

    /// Why a description of one process's probes matched none, when the process says
    /// more than DTrace's bare "does not match any probes": the executable is static
    /// (a library module named is not there) or stripped (the function named is not
    /// among the few it exports).
    pub fn why_no_match(&mut self, d: &ProbeDesc) -> Option<String> {
        if let Some((provider, pid)) = crate::usdt::provider_process(&d.provider) {
            return self.why_no_usdt(&provider, pid);
        }
        let pid = named_process(&d.provider)?;
        let objects = procfs::objects_of(pid).ok()?;
        let main = objects.iter().find(|o| o.is_main)?;
        let module = if d.module.is_empty() { "*" } else { d.module.as_str() };
        let named: Vec<&LoadedObject> =
            objects.iter().filter(|o| !o.is_vdso && modules::module_matches(module, &o.path, o.is_main)).collect();
        let deleted: Vec<&str> = named.iter().filter(|o| o.deleted).map(|o| modules::module_name(&o.path)).collect();
        if !deleted.is_empty() {
            return Some(deleted_note(&deleted, pid));
        }
        if named.is_empty() {
            // A process without a dynamic loader has no libraries: their code, when it
            // has any, was linked into the executable.
            return procfs::loader_of(pid, &objects).is_none().then(|| {
                let exe = modules::module_name(&main.path);
                format!("{exe} is statically linked: it maps no library, its libc functions are in a.out")
            });
        }
        // Every library of a distribution is stripped: only the objects named, or
        // the executable under a glob, are worth a word.
        let candidates: Vec<&LoadedObject> = match glob::is_glob(module) {
            true => vec![main],
            false => named,
        };
        for obj in candidates {
            let loaded = self.load_mapped(pid, obj).ok()?;
            if let Some(note) = stripped_note(obj, &loaded, pid) {
                return Some(note);
            }
        }
        None
    }

    /// A `pid*` description: its probes in every object of every process now running
    /// (each file once). What does not match in one object is no error.
    pub fn matching_all(&mut self, d: &ProbeDesc, next_id: &mut u32) -> Vec<Rc<Probe>> {
        let me = std::process::id() as i32;
        let mut out = Vec::new();
        let mut done = HashSet::new();
        for pid in procfs::all_pids().unwrap_or_default() {
            if pid == me {
                continue;
            }
            let Ok(objects) = procfs::objects_of(pid) else { continue };
            for obj in objects.into_iter().filter(|o| !o.is_vdso) {
                let key = (procfs::host_path(pid, &obj.path), obj.is_main);
                if done.insert(key.clone()) {
                    self.all_files.insert(key);
                    out.extend(
                        self.match_objects(d, 0, pid, std::slice::from_ref(&obj), false, next_id).unwrap_or_default(),
                    );
                }
            }
        }
        out
    }

    /// A `pid*` description's probes in objects process `pid` has newly mapped.
    pub fn rematch_all(
        &mut self,
        d: &ProbeDesc,
        pid: i32,
        objects: &[LoadedObject],
        next_id: &mut u32,
    ) -> Vec<Rc<Probe>> {
        if let Some(provider) = crate::usdt::all_processes_provider(&d.provider) {
            return self.match_usdt(d, &provider, 0, pid, objects, next_id);
        }
        if !is_all_processes(&d.provider) || d.function == "-" {
            return Vec::new();
        }
        self.match_objects(d, 0, pid, objects, false, next_id).unwrap_or_default()
    }

    /// For a process followed from `root` (a child, or `root` after exec or dlopen):
    /// the probes of `pid<root>` descriptions in objects `pid` has newly mapped. What
    /// does not match here is no error: the description may match elsewhere.
    pub fn rematch(
        &mut self,
        d: &ProbeDesc,
        root: i32,
        pid: i32,
        objects: &[LoadedObject],
        next_id: &mut u32,
    ) -> Vec<Rc<Probe>> {
        if let Some((provider, owner)) = crate::usdt::provider_process(&d.provider) {
            if owner != root {
                return Vec::new();
            }
            return self.match_usdt(d, &provider, root, pid, objects, next_id);
        }
        if provider_pid(&d.provider) != Ok(Some(root)) || d.function == "-" {
            return Vec::new();
        }
        self.match_objects(d, root, pid, objects, false, next_id).unwrap_or_default()
    }

    /// Probes of `pid<owner>` in `objects` of process `pid`. `strict`: a function or
    /// offset that is not there is an error (the description is being compiled).
    fn match_objects(
        &mut self,
        d: &ProbeDesc,
        owner: i32,
        pid: i32,
        objects: &[LoadedObject],
        strict: bool,
        next_id: &mut u32,
    ) -> Result<Vec<Rc<Probe>>, DescError> {
        let module = if d.module.is_empty() { "*" } else { d.module.as_str() };
        let func = if d.function.is_empty() { "*" } else { d.function.as_str() };
        let name = if d.name.is_empty() { "*" } else { d.name.as_str() };
        let mut out = Vec::new();
        for obj in objects.iter().filter(|o| !o.is_vdso) {
            if !modules::module_matches(module, &obj.path, obj.is_main) {
                continue;
            }
            // Its path names another file, or none: sites read there would be another
            // build's, and patched or probed at the wrong places.
            if obj.deleted {
                if strict && !glob::is_glob(module) {
                    return Err((Tag::D_PROC_LIB, deleted_note(&[&obj.path], pid)));
                }
                continue;
            }
            let file = procfs::host_path(pid, &obj.path);
            let loaded = match self.load(&file) {
                Ok(l) => l,
                // A mapping that is not an ELF object (a locale archive, a font, a
                // device) has no probes: never an error.
                Err(LoadError::Elf { .. } | LoadError::NotRegular { .. }) => continue,
                // Nor is a file that cannot be read (unreadable, too large) when no
                // module was named: only a module asked for by name must be readable.
                Err(e) if strict && !glob::is_glob(module) => {
                    return Err((Tag::D_PROC_LIB, format!("failed to read {}: {e}", file.display())))
                }
                Err(_) => continue,
            };
            let funcs: Vec<Function> = loaded.matching(func).into_iter().cloned().collect();
            if funcs.is_empty() && !glob::is_glob(func) && !glob::is_glob(module) {
                if strict {
                    let why = stripped_note(obj, &loaded, pid).map(|n| format!(": {n}")).unwrap_or_default();
                    return Err((Tag::D_PROC_FUNC, format!("failed to lookup '{func}' in module '{module}'{why}")));
                }
                continue;
            }
            let modname = modules::module_name(&obj.path).to_string();
            for f in &funcs {
                let r = self.per_function(owner, &file, &modname, f, name, &loaded, next_id, &mut out);
                if strict {
                    r?;
                }
            }
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn per_function(
        &mut self,
        pid: i32,
        file: &Path,
        modname: &str,
        f: &Function,
        name: &str,
        loaded: &ObjectSymbols,
        next_id: &mut u32,
        out: &mut Vec<Rc<Probe>>,
    ) -> Result<(), DescError> {
        let Some(base) = loaded.file_offset(f.addr) else { return Ok(()) };
        // Its code, read from the file once (an object's code is not kept in memory).
        let code = loaded.code(f);
        let code = code.as_deref().unwrap_or(&[]);
        // Decoding is only needed for return and offset probes.
        let mut decoded: Option<Sites> = None;
        let sites = |decoded: &mut Option<Sites>| -> Sites {
            decoded
                .get_or_insert_with(|| sites::decode_with_parts(code, f.addr, &loaded.table().other_parts(f)))
                .clone()
        };
        let mut matched = 0;
        if glob::matches(name, "return") {
            // Every function has a return probe, as in DTrace; one that never returns
            // (an endless loop, `_start`) has no site, and its probe never fires.
            let s = sites(&mut decoded);
            let list = s.returns.iter().map(|&o| (u64::from(o), base + u64::from(o))).collect();
            out.push(self.add(pid, file, modname, f, SiteKind::Return, "return".into(), list, code, next_id));
            matched += 1;
        }
        if glob::matches(name, "entry") {
            out.push(self.add(pid, file, modname, f, SiteKind::Entry, "entry".into(), vec![(0, base)], code, next_id));
            matched += 1;
        }
        if !glob::is_glob(name) && matched == 0 {
            let off = u64::from_str_radix(name, 16)
                .map_err(|_| (Tag::D_PROC_NAME, format!("'{name}' is an invalid probe name")))?;
            if off >= f.size {
                return Err((Tag::D_PROC_OFF, format!("offset 0x{off:x} outside of function '{}'", f.name)));
            }
            let s = sites(&mut decoded);
            if sites::check_offset(&s, f.size, off).is_err() {
                return Err((Tag::D_PROC_ALIGN, format!("offset 0x{off:x} is not aligned on an instruction")));
            }
            out.push(self.add(
                pid,
                file,
                modname,
                f,
                SiteKind::Offset(off),
                format!("{off:x}"),
                vec![(off, base + off)],
                code,
                next_id,
            ));
        } else if glob::is_glob(name) {
            let s = sites(&mut decoded);
            for &o in &s.insns {
                let label = format!("{o:x}");
                // A glob asks for the instructions there are probes on: those the kernel
                // refuses (`hlt`, `syscall`) have none, as fasttrap made none.
                if glob::matches(name, &label) && probeable_at(code, u64::from(o), f.addr + u64::from(o)) {
                    let o = u64::from(o);
                    out.push(self.add(
                        pid,
                        file,
                        modname,
                        f,
                        SiteKind::Offset(o),
                        label,
                        vec![(o, base + o)],
                        code,
                        next_id,
                    ));
                }
            }
        }
        Ok(())
    }

    /// `pid<N>:a.out:-:<address>`: a probe at one address of the executable. An address
    /// in what the executable maps in the process is the process's, as in DTrace; any
    /// other is the file's, as `nm` and `objdump` print it (DTrace for Linux reads a
    /// PIE's so): a stripped PIE's functions have no other stable name.
    fn absolute(
        &mut self,
        pid: i32,
        module: &str,
        name: &str,
        objects: &[LoadedObject],
        next_id: &mut u32,
    ) -> Result<Vec<Rc<Probe>>, DescError> {
        let Some(main) = objects.iter().find(|o| o.is_main) else {
            return Err((Tag::D_PROC_LIB, format!("process {pid} has no executable mapped")));
        };
        if !module.is_empty() && (glob::is_glob(module) || !modules::module_matches(module, &main.path, true)) {
            return Err((Tag::D_PROC_LIB, "only the a.out module is valid with the '-' function".into()));
        }
        if glob::is_glob(name) {
            return Err((Tag::D_PROC_NAME, "only individual addresses may be specified with the '-' function".into()));
        }
        let addr = u64::from_str_radix(name, 16)
            .map_err(|_| (Tag::D_PROC_NAME, format!("'{name}' is an invalid probe name")))?;
        if main.deleted {
            return Err((Tag::D_PROC_LIB, deleted_note(&[&main.path], pid)));
        }
        let file = procfs::host_path(pid, &main.path);
        let loaded =
            self.load(&file).map_err(|e| (Tag::D_PROC_LIB, format!("failed to read {}: {e}", file.display())))?;
        let in_process = main.mappings.iter().any(|m| m.start <= addr && addr < m.end);
        let vaddr = match (in_process, main.bias(&loaded.info)) {
            (true, Some(bias)) => addr.wrapping_sub(bias),
            _ => addr,
        };
        let modname = modules::module_name(&main.path).to_string();
        let module = if module.is_empty() { "a.out" } else { module };
        let (off, len) = loaded.instruction_at(vaddr).map_err(|e| match e {
            AddressError::NotCode => (
                Tag::D_PROC_NAME,
                format!(
                    "failed to lookup 0x{addr:x} in module '{module}': it is not in {modname}'s code, as an address \
                     of process {pid} nor as one of its file's (as nm and objdump print them)"
                ),
            ),
            e => (Tag::D_PROC_ALIGN, format!("address 0x{addr:x} in module '{module}': {e}")),
        })?;
        // Its function is unknown: the instruction alone stands for it, which a backend
        // may patch or put a breakpoint on as it would a function's.
        let f = Function { name: "-".into(), mangled: None, aliases: Vec::new(), addr: vaddr, size: len, ifunc: false };
        let code = usize::try_from(len).ok().and_then(|n| loaded.bytes(off, n)).unwrap_or_default();
        Ok(vec![self.add(
            pid,
            &file,
            &modname,
            &f,
            SiteKind::Offset(0),
            name.to_string(),
            vec![(0, off)],
            &code,
            next_id,
        )])
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
        &mut self,
        pid: i32,
        file: &Path,
        modname: &str,
        f: &Function,
        kind: SiteKind,
        name: String,
        sites: Vec<(u64, u64)>,
        code: &[u8],
        next_id: &mut u32,
    ) -> Rc<Probe> {
        let key = (pid, file.to_path_buf(), f.addr, kind);
        if let Some(&i) = self.index.get(&key) {
            return Rc::clone(&self.probes[i].probe);
        }
        // Owner 0: a `pid*` probe, of every process.
        let prefix = match kind {
            SiteKind::Usdt(k) => self.usdt.provider(k),
            _ => "pid",
        };
        let provider = if pid == 0 { prefix.to_string() } else { format!("{prefix}{pid}") };
        let probe = Rc::new(Probe::new(*next_id, &provider, modname, &f.name, &name));
        *next_id += 1;
        self.ids.insert(probe.id);
        self.index.insert(key, self.probes.len());
        let (sites, refused): (Vec<_>, Vec<_>) =
            sites.into_iter().partition(|&(off, _)| probeable_at(code, off, f.addr + off));
        let unprobeable = refused;
        self.probes.push(PidProbe {
            probe: Rc::clone(&probe),
            pid,
            file: file.to_path_buf(),
            kind,
            func_vaddr: f.addr,
            func_size: f.size,
            sites,
            unprobeable,
            semaphore: 0,
            usdt_regs: Vec::new(),
        });
        probe
    }
}

/// Why objects `names` of process `pid` have no probes: their files are gone.
fn deleted_note(names: &[&str], pid: i32) -> String {
    let (was, it, its) = if names.len() == 1 { ("was", "it", "its") } else { ("were", "them", "their") };
    format!(
        "{} {was} deleted or replaced since process {pid} mapped {it}: {its} probes cannot be placed (restart the \
         process to probe {it})",
        names.join(", ")
    )
}

/// What can still be probed in `obj` of process `pid` when it is stripped, and where
/// its debug file was looked for.
fn stripped_note(obj: &LoadedObject, loaded: &ObjectSymbols, pid: i32) -> Option<String> {
    if !loaded.stripped() {
        return None;
    }
    let name = modules::module_name(&obj.path);
    let n = loaded.table().functions().len();
    let addresses = format!("absolute addresses (pid{pid}:a.out:-:ADDR)");
    let what = match (n, obj.is_main) {
        (0, true) => format!("{name} is stripped and exports no function: only {addresses} can be probed"),
        (0, false) => format!("{name} is stripped and exports no function: none of it can be probed by name"),
        (1, _) => format!("{name} is stripped: only its 1 exported function can be probed by name"),
        (n, true) => {
            format!("{name} is stripped: only its {n} exported functions can be probed by name, or {addresses}")
        }
        (n, false) => format!("{name} is stripped: only its {n} exported functions can be probed by name"),
    };
    if let Some(p) = &loaded.debug_refused {
        return Some(format!("{what}; {} is not its debug file (unreadable, or another build's)", p.display()));
    }
    let file = procfs::host_path(pid, &obj.path);
    let root = Path::new(debuginfo::DEFAULT_DEBUG_ROOT);
    let looked: Vec<String> =
        debuginfo::debug_file_candidates(&file, &loaded.info, root).iter().map(|p| p.display().to_string()).collect();
    if looked.is_empty() {
        return Some(what);
    }
    let link = loaded.info.debuglink.as_deref().map(|l| format!(" {l}")).unwrap_or_default();
    Some(format!("{what}; its debug file{link} was not found (looked for {})", looked.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::{is_all_processes, provider_pid};

    #[test]
    fn provider_names() {
        use udtrace_lang::Tag;
        assert_eq!(provider_pid("pid123"), Ok(Some(123)));
        assert_eq!(provider_pid("p*d123"), Ok(Some(123)), "a glob that matches pid123");
        assert_eq!(provider_pid("pid[0-9]*"), Ok(None), "no pid at the end: pid* is every process");
        assert_eq!(provider_pid("syscall"), Ok(None));
        assert_eq!(provider_pid("pid*"), Ok(None));
        assert_eq!(provider_pid("pidgin"), Ok(None), "not the pid provider: matches nothing");
        assert_eq!(provider_pid("foo123"), Ok(None), "pid123 does not match foo123");
        assert_eq!(provider_pid("pid0"), Err((Tag::D_PROC_BADPID, "pid0 does not contain a valid pid".into())));
        assert_eq!(provider_pid("pid00"), Err((Tag::D_PROC_BADPID, "'pid00' does not contain a valid pid".into())));
        assert_eq!(provider_pid("123"), Err((Tag::D_PROC_BADPROV, "'123' is not a valid provider".into())));
    }

    #[test]
    fn all_processes() {
        assert!(is_all_processes("pid*"));
        assert!(is_all_processes("pid?"));
        assert!(!is_all_processes("pid*1"), "ends in a pid: one process");
        assert!(!is_all_processes("pid12"));
    }

    /// A USDT argument's capture reads the register the site has it in, none where the
    /// site has it elsewhere, another capture reads that register, or the site is not
    /// the probe's; argument registers' captures read theirs everywhere.
    #[test]
    fn string_registers_per_site() {
        use super::{PidProbe, SiteKind};
        use crate::backend::USDT_STRING;
        use udtrace_record::pid::PtReg::{Di, Si, R12};
        let p = PidProbe {
            probe: std::rc::Rc::new(udtrace_runtime::Probe::new(1, "fixture", "a", "f", "string")),
            pid: 0,
            file: "/a".into(),
            kind: SiteKind::Usdt(0),
            func_vaddr: 0x1000,
            func_size: 64,
            sites: vec![(0x10, 0x1010), (0x20, 0x1020)],
            unprobeable: Vec::new(),
            semaphore: 0,
            usdt_regs: vec![(0x10, vec![Some(Di), None, Some(R12)]), (0x20, vec![Some(Si)])],
        };
        let codes = [1, USDT_STRING, USDT_STRING + 1, USDT_STRING + 2];
        assert_eq!(p.string_regs(0x10, &codes), vec![Some(Si), Some(Di), None, Some(R12)]);
        // Argument 0 in rsi here: `arg1`'s capture (rsi) reads it already.
        assert_eq!(p.string_regs(0x20, &codes), vec![Some(Si), None, None, None]);
        assert_eq!(p.string_regs(0x30, &codes), vec![Some(Si), None, None, None]);
    }
}
