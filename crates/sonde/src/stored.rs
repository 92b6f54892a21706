//! The commands over stored runs: list, show, export and import them; compare two labels;
//! write a report.

use std::process::ExitCode;

use anyhow::Context;

use crate::cli;
use crate::errors::EXIT_WORSE;

pub fn results_command(a: cli::ResultsArgs) -> anyhow::Result<ExitCode> {
    let store = sonde_store::Store::open(&sonde_store::default_path(a.db.as_deref()))?;
    match a.action {
        cli::ResultsAction::List { label } => {
            let runs = store.list(label.as_deref())?;
            out!(
                "{}",
                sonde_report::summary::runs(
                    &runs
                        .iter()
                        .map(|r| (r.id, r.label.clone(), &r.document))
                        .collect::<Vec<_>>()
                )
            );
        }
        cli::ResultsAction::Show { id } => {
            print!("{}", sonde_report::json(&store.get(id)?.document))
        }
        cli::ResultsAction::Export { ids, label, format } => {
            let runs: Vec<sonde_store::Run> = if let Some(l) = &label {
                let runs = store.list(Some(l))?;
                anyhow::ensure!(
                    !runs.is_empty(),
                    "--label {l}: no stored run has this label"
                );
                runs
            } else if ids.is_empty() {
                store.list(None)?
            } else {
                ids.iter()
                    .map(|&i| store.get(i))
                    .collect::<Result<_, _>>()?
            };
            match format {
                cli::ExportFormat::Json => {
                    let docs: Vec<&sonde_results::Document> =
                        runs.iter().map(|r| &r.document).collect();
                    jsonln!("{}", serde_json::to_string_pretty(&docs)?);
                }
                cli::ExportFormat::Csv => out!(
                    "{}",
                    sonde_report::csv::intervals(
                        &runs.iter().map(|r| (r.id, &r.document)).collect::<Vec<_>>()
                    )
                ),
                cli::ExportFormat::Openmetrics => {
                    let docs: Vec<&sonde_results::Document> =
                        runs.iter().map(|r| &r.document).collect();
                    out!("{}", sonde_report::openmetrics::export(&docs))
                }
                cli::ExportFormat::HdrLog => out!(
                    "{}",
                    sonde_report::hdr_log::interval_log(
                        &runs.iter().map(|r| (r.id, &r.document)).collect::<Vec<_>>()
                    )?
                ),
            }
        }
        cli::ResultsAction::Import { files, label } => {
            for f in files {
                let bytes =
                    std::fs::read(&f).with_context(|| format!("cannot read {}", f.display()))?;
                let doc: sonde_results::Document = serde_json::from_slice(&bytes)
                    .with_context(|| format!("{} is not a sonde result document", f.display()))?;
                let id = store.save(&doc, label.as_deref())?;
                outln!("imported {} as run {id}", f.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn compare_command(a: cli::CompareArgs) -> anyhow::Result<ExitCode> {
    let store = sonde_store::Store::open(&sonde_store::default_path(a.db.as_deref()))?;
    let (ra, rb) = (store.named(&a.a)?, store.named(&a.b)?);
    anyhow::ensure!(
        ra[0].test == rb[0].test,
        "'{}' holds {} runs and '{}' holds {} runs: compare like with like",
        a.a,
        ra[0].test,
        a.b,
        rb[0].test
    );
    let da: Vec<&sonde_results::Document> = ra.iter().map(|r| &r.document).collect();
    let db: Vec<&sonde_results::Document> = rb.iter().map(|r| &r.document).collect();
    let cmp = sonde_results::compare::compare_runs(&da, &db);
    let limits = sonde_results::compare::limit_shift(&da, &db);
    if a.json {
        // The figures' rows, then what limited each group as one more row.
        let mut rows = serde_json::to_value(&cmp)?;
        if let (Some(l), Some(rows)) = (&limits, rows.as_array_mut()) {
            rows.push(serde_json::to_value(l)?);
        }
        jsonln!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        out!(
            "{}",
            sonde_report::summary::comparison(&a.a, &a.b, &cmp, limits.as_ref())
        );
    }
    let worse = a
        .fail_if_worse
        .is_some_and(|limit| sonde_results::compare::regressed(&cmp, limit));
    Ok(if worse {
        ExitCode::from(EXIT_WORSE)
    } else {
        ExitCode::SUCCESS
    })
}

pub fn report_command(a: cli::ReportArgs) -> anyhow::Result<ExitCode> {
    let store = sonde_store::Store::open(&sonde_store::default_path(a.db.as_deref()))?;
    let mut groups: Vec<(String, Vec<sonde_store::Run>)> = Vec::new();
    for sel in &a.runs {
        groups.push((sel.clone(), store.named(sel)?));
    }
    let stored = groups
        .iter()
        .flat_map(|(_, rs)| rs.iter().map(|r| (r.id, r.label.clone(), &r.document)))
        .collect();
    let runs = sonde_report::html::ReportRun::named(stored);
    let cmp = match &groups[..] {
        [(a_name, ra), (b_name, rb)] if ra[0].test == rb[0].test => {
            let da: Vec<&sonde_results::Document> = ra.iter().map(|r| &r.document).collect();
            let db: Vec<&sonde_results::Document> = rb.iter().map(|r| &r.document).collect();
            Some((
                a_name.as_str(),
                b_name.as_str(),
                sonde_results::compare::compare_runs(&da, &db),
                sonde_results::compare::limit_shift(&da, &db),
            ))
        }
        _ => None,
    };
    let when = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let cmp_ref = cmp.as_ref().map(|(x, y, c, _)| (*x, *y, c.as_slice()));
    let report = sonde_report::html::Report {
        title: &a.title,
        generated_at: &when,
        runs: &runs,
        comparison: cmp_ref,
        limits: cmp.as_ref().and_then(|c| c.3.as_ref()),
    };
    let text = match a.output.extension().and_then(|e| e.to_str()) {
        Some("md") => sonde_report::html::markdown(&report),
        Some("html") | Some("htm") => sonde_report::html::render(&report),
        _ => anyhow::bail!("-o {}: the report is .html or .md", a.output.display()),
    };
    crate::measure::write_atomically(&a.output, text.as_bytes())?;
    outln!("wrote {} ({} runs)", a.output.display(), runs.len());
    Ok(ExitCode::SUCCESS)
}
