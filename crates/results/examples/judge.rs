//! Judges stored result documents again with the current rules: `cargo run -p
//! sonde-results --example judge -- FILE.json...` prints each file's verdict, its strength,
//! evidence and runner-up, so a rule change can be tried on captured runs.

fn main() {
    for path in std::env::args().skip(1) {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{path}: {e}");
                continue;
            }
        };
        match serde_json::from_str::<sonde_results::Document>(&text) {
            Ok(doc) => match sonde_results::limit::judge(&doc) {
                Some(v) => println!(
                    "{path}: {} {:.2}{}\n    {}",
                    v.verdict,
                    v.strength,
                    v.runner_up
                        .as_ref()
                        .map(|r| format!(" (runner-up {} {:.2})", r.verdict, r.strength))
                        .unwrap_or_default(),
                    v.evidence
                        .iter()
                        .map(|e| e.text.as_str())
                        .collect::<Vec<_>>()
                        .join("\n    ")
                ),
                None => println!("{path}: no verdict"),
            },
            Err(e) => eprintln!("{path}: not a result document: {e}"),
        }
    }
}
