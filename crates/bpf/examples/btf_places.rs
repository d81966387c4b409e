//! Prints where task data lies in the running kernel (a development aid).
fn main() {
    let b = udtrace_bpf::btf::Btf::vmlinux().expect("btf");
    for a in std::env::args().skip(1) {
        if let Some(tp) = a.strip_prefix("tp:") {
            println!("{a}: {:?}", b.tracepoint_arity(tp));
        } else if let Some(e) = a.strip_prefix("enum:") {
            println!("{a}: {:?}", b.enumerator(e));
        } else {
            let (s, p) = a.split_once(':').unwrap();
            println!("{a}: {:?}", b.place(s, p));
        }
    }
}
