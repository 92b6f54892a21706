//! `sonde tune plan | apply | restore`: each action run, and what it says as text.

use std::path::{Path, PathBuf};

use sonde_probe::tune::{plan_live, Goal};

use super::{apply, need_root, restore, state_file, TuneError};
use crate::stored::Text;

/// `sonde tune plan`: what `apply` would change, as JSON or one line a change.
pub fn plan(goal: Goal, dev: Option<&str>, json: bool) -> Result<Text, TuneError> {
    let plan = plan_live(goal, dev);
    if json {
        let text = serde_json::to_string_pretty(&plan).map_err(|e| TuneError(e.to_string()))?;
        return Ok(Text::Json(text));
    }
    Ok(Text::Terminal(match plan.is_empty() {
        true => format!("nothing to change for {goal:?}\n"),
        false => lines(plan.iter().map(|c| c.describe())),
    }))
}

/// `sonde tune apply` (root only): the previous values saved in the state file, then
/// changed; what changed, and how to put it back.
pub fn apply_goal(
    goal: Goal,
    dev: Option<&str>,
    state: Option<PathBuf>,
) -> Result<Text, TuneError> {
    need_root()?;
    let state = state_file(state)?;
    let plan = plan_live(goal, dev);
    apply(Path::new("/"), goal, &plan, &state)?;
    let s = state.display();
    let changed = plan.iter().map(|c| format!("changed {}", c.describe()));
    let back =
        format!("previous values saved in {s}; `sonde tune restore --state {s}` puts them back");
    Ok(Text::Terminal(lines(changed.chain([back]))))
}

/// `sonde tune restore`: what `apply` saved put back; what was restored.
pub fn restore_saved(state: Option<PathBuf>) -> Result<Text, TuneError> {
    let restored = restore(Path::new("/"), &state_file(state)?)?;
    let said = restored
        .iter()
        .map(|c| format!("restored {}", c.describe_restored()));
    Ok(Text::Terminal(lines(said)))
}

/// Each line ended by a newline.
fn lines(lines: impl Iterator<Item = String>) -> String {
    lines.map(|l| l + "\n").collect()
}
