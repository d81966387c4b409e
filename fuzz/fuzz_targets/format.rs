//! printf() formats: parse any bytes; when they parse, format them with arguments
//! of the kinds they ask for and with arguments of the wrong kinds.
#![no_main]

use libfuzzer_sys::fuzz_target;

use udtrace_runtime::agg::{AggFunc, AggState};
use udtrace_runtime::format::printf::{format, format_into, AggValue};
use udtrace_runtime::format::{parse_format, ArgKind, FormatCtx};
use udtrace_runtime::{Int, Value};

/// A value of the kind a conversion wants; `pick` varies it between extremes.
fn arg(kind: ArgKind, pick: u8) -> Value {
    let ints = [0i64, 1, -1, 42, i64::MIN, i64::MAX, 1 << 40, -100_000];
    let n = ints[pick as usize % ints.len()];
    match kind {
        ArgKind::Str => Value::Str(match pick % 3 {
            0 => Vec::new(),
            1 => b"hello\n\t\x01\xff".to_vec(),
            _ => vec![b'x'; 300],
        }),
        ArgKind::Stack => Value::Stack(vec!["libc.so.6`malloc+0x1a".into(), "a.out`main+0x4".into()]),
        ArgKind::Char => Value::Int(Int { bits: n as u64 & 0xff, size: 1, signed: true }),
        ArgKind::Width | ArgKind::Precision => Value::int([0, 5, -5, 100_000, i64::MIN][pick as usize % 5]),
        _ => Value::Int(Int { bits: n as u64, size: [1, 2, 4, 8][pick as usize % 4], signed: pick & 4 == 0 }),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, fmt)) = data.split_first() else { return };
    let Ok(f) = parse_format(fmt) else { return };
    let ctx = FormatCtx::default();
    let kinds: Vec<ArgKind> = f.args().into_iter().filter(|k| *k != ArgKind::Aggregation).collect();
    // Matching arguments, then each argument of every other shape, then too few.
    let good: Vec<Value> = kinds.iter().enumerate().map(|(i, k)| arg(*k, pick.wrapping_add(i as u8))).collect();
    let _ = format(&f, &good, &ctx);
    for other in [Value::int(7), Value::str("s"), Value::Bytes(vec![1, 2, 3]), Value::Stack(Vec::new())] {
        let wrong = vec![other; kinds.len()];
        let _ = format(&f, &wrong, &ctx);
    }
    if !good.is_empty() {
        let _ = format(&f, &good[..good.len() - 1], &ctx);
    }
    // printa(): `%@` takes aggregation values, scalar and distribution alike.
    if f.has_aggregation_conv() {
        // States built the way the consumer builds them, so their shapes are valid.
        let funcs = [
            AggFunc::Count,
            AggFunc::Avg,
            AggFunc::Stddev,
            AggFunc::Quantize,
            AggFunc::Lquantize { base: -10, limit: 10, step: 5 },
            AggFunc::Llquantize { factor: 10, low: 0, high: 3, nsteps: 10 },
        ];
        let states: Vec<AggState> = funcs
            .iter()
            .map(|func| {
                let mut s = AggState::new(func);
                for v in [0, -3, 7, 1 << 20] {
                    s.update(v, 1 + pick as i64);
                }
                s
            })
            .collect();
        let aggs: Vec<AggValue> = states.iter().map(|state| AggValue { state, normal: 1 + pick as u64 % 3 }).collect();
        let mut out = Vec::new();
        let _ = format_into(&mut out, &f, &good, &aggs, &ctx);
        out.clear();
        let _ = format_into(&mut out, &f, &good, &[], &ctx);
    }
});
