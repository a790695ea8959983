//! Words shared by every text portdrift writes (reports, logs, the Node condition).

/// `1 listener`, `4 listeners`: a count and its noun, in the plural unless it is one.
pub fn count_of(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else if let Some(stem) = noun.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'o', 'u'])
    {
        format!("{n} {stem}ies")
    } else {
        format!("{n} {noun}s")
    }
}
