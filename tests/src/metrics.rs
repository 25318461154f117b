//! A strict reader of the Prometheus text exposition (the OpenMetrics text format the service
//! serves): every line must be a `# HELP`, `# TYPE` or `# UNIT` of the family being described,
//! or a sample of it with a name the family's type allows, well-formed labels (no label twice,
//! values escaped) and a number; the text ends with `# EOF`; a histogram's buckets are
//! cumulative and its `+Inf` bucket equals its count. Anything else is an error naming the line.

use std::collections::{BTreeMap, HashSet};

/// One sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// One family: its type and samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Family {
    pub kind: String,
    pub help: Option<String>,
    pub samples: Vec<Sample>,
}

/// Every family of a scrape, by name.
#[derive(Clone, Debug, Default)]
pub struct Exposition {
    pub families: BTreeMap<String, Family>,
}

impl Exposition {
    /// The value of the sample `name` whose labels include `labels`, summed over the others.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut found = None;
        for family in self.families.values() {
            for sample in &family.samples {
                if sample.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| sample.labels.get(*k).map(String::as_str) == Some(*v))
                {
                    *found.get_or_insert(0.0) += sample.value;
                }
            }
        }
        found
    }

    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.get(name)
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The suffixes a sample of a family of `kind` may add to its name.
fn suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "counter" => &["_total", "_created"],
        "gauge" | "unknown" | "stateset" | "info" => &[""],
        "histogram" | "gaugehistogram" => {
            &["_bucket", "_count", "_sum", "_created", "_gcount", "_gsum"]
        }
        "summary" => &["", "_count", "_sum", "_created"],
        _ => &[],
    }
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => text.parse::<f64>().ok(),
    }
}

/// `{a="1",b="x\"y"}` into its labels; `None` when malformed.
fn parse_labels(text: &str) -> Option<BTreeMap<String, String>> {
    let inner = text.strip_prefix('{')?.strip_suffix('}')?;
    let mut labels = BTreeMap::new();
    let mut rest = inner;
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let name = &rest[..eq];
        if !valid_label_name(name) {
            return None;
        }
        rest = rest[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    '"' => value.push('"'),
                    '\\' => value.push('\\'),
                    _ => return None,
                },
                '"' => break i,
                '\n' => return None,
                c => value.push(c),
            }
        };
        if labels.insert(name.to_owned(), value).is_some() {
            return None;
        }
        rest = &rest[end + 1..];
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
            if rest.is_empty() {
                return None;
            }
        } else if !rest.is_empty() {
            return None;
        }
    }
    Some(labels)
}

/// Parses `text` strictly; the error names the first line that does not conform.
pub fn parse(text: &str) -> Result<Exposition, String> {
    let mut exposition = Exposition::default();
    let mut current: Option<String> = None;
    let mut seen_eof = false;
    let mut described: HashSet<String> = HashSet::new();
    for (number, line) in text.lines().enumerate() {
        let at = |why: &str| format!("line {}: {why}: {line:?}", number + 1);
        if seen_eof {
            return Err(at("text after # EOF"));
        }
        if line == "# EOF" {
            seen_eof = true;
            continue;
        }
        if let Some(comment) = line.strip_prefix("# ") {
            let mut parts = comment.splitn(3, ' ');
            let keyword = parts.next().unwrap_or_default();
            let name = parts
                .next()
                .ok_or_else(|| at("a descriptor without a name"))?;
            let rest = parts.next().unwrap_or_default();
            if !valid_name(name) {
                return Err(at("an invalid metric name"));
            }
            if current.as_deref() != Some(name) {
                if !described.insert(name.to_owned()) {
                    return Err(at("a family described twice"));
                }
                current = Some(name.to_owned());
            }
            let family = exposition.families.entry(name.to_owned()).or_default();
            match keyword {
                "TYPE" => {
                    if suffixes(rest).is_empty() {
                        return Err(at("an unknown type"));
                    }
                    if !family.kind.is_empty() || !family.samples.is_empty() {
                        return Err(at("a TYPE after the family's samples or another TYPE"));
                    }
                    family.kind = rest.to_owned();
                }
                "HELP" => family.help = Some(rest.to_owned()),
                "UNIT" => {
                    if !name.ends_with(&format!("_{rest}")) {
                        return Err(at("a unit the name does not end with"));
                    }
                }
                _ => return Err(at("an unknown descriptor")),
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            return Err(at("neither a descriptor nor a sample"));
        }
        let (name_and_labels, value_part) = match line.find('{') {
            Some(open) => {
                let close = line.rfind('}').ok_or_else(|| at("unclosed labels"))?;
                (
                    (&line[..open], Some(&line[open..=close])),
                    line[close + 1..].trim_start(),
                )
            }
            None => {
                let space = line
                    .find(' ')
                    .ok_or_else(|| at("a sample without a value"))?;
                ((&line[..space], None), line[space + 1..].trim_start())
            }
        };
        let (name, labels) = name_and_labels;
        if !valid_name(name) {
            return Err(at("an invalid sample name"));
        }
        let labels = match labels {
            Some(text) => parse_labels(text).ok_or_else(|| at("malformed labels"))?,
            None => BTreeMap::new(),
        };
        let mut values = value_part.split(' ');
        let value = values
            .next()
            .and_then(parse_value)
            .ok_or_else(|| at("a value that is not a number"))?;
        if let Some(timestamp) = values.next()
            && timestamp.parse::<f64>().is_err()
        {
            return Err(at("a timestamp that is not a number"));
        }
        if values.next().is_some() {
            return Err(at("more than a value and a timestamp"));
        }
        let family_name = current
            .clone()
            .ok_or_else(|| at("a sample before any TYPE"))?;
        let family = exposition
            .families
            .get_mut(&family_name)
            .ok_or_else(|| at("a sample of no family"))?;
        let suffix = name
            .strip_prefix(family_name.as_str())
            .ok_or_else(|| at("a sample of another family"))?;
        if !suffixes(&family.kind).contains(&suffix) {
            return Err(at("a sample name the family's type does not allow"));
        }
        if suffix == "_bucket" && !labels.contains_key("le") {
            return Err(at("a bucket without le"));
        }
        if family.kind == "counter" && value < 0.0 {
            return Err(at("a negative counter"));
        }
        family.samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    if !seen_eof {
        return Err("the text does not end with # EOF".to_owned());
    }
    for (name, family) in &exposition.families {
        if family.kind.is_empty() {
            return Err(format!("{name} has no TYPE"));
        }
        if family.kind == "histogram" {
            check_histogram(name, family)?;
        }
    }
    Ok(exposition)
}

/// Each series' buckets are cumulative, end at `+Inf`, and `+Inf` equals the count.
fn check_histogram(name: &str, family: &Family) -> Result<(), String> {
    let series_key = |sample: &Sample| {
        let mut labels = sample.labels.clone();
        labels.remove("le");
        labels
    };
    type Series = Vec<(String, String)>;
    let mut series: BTreeMap<Series, Vec<(f64, f64)>> = BTreeMap::new();
    let mut counts: BTreeMap<Series, f64> = BTreeMap::new();
    for sample in &family.samples {
        let key: Vec<(String, String)> = series_key(sample).into_iter().collect();
        if sample.name.ends_with("_bucket") {
            let le = sample
                .labels
                .get("le")
                .and_then(|le| parse_value(le))
                .ok_or_else(|| format!("{name}: a bucket's le is not a number"))?;
            series.entry(key).or_default().push((le, sample.value));
        } else if sample.name.ends_with("_count") {
            counts.insert(key, sample.value);
        }
    }
    for (key, buckets) in &series {
        let mut last = (f64::NEG_INFINITY, 0.0);
        for &(le, count) in buckets {
            if le <= last.0 || count < last.1 {
                return Err(format!("{name} {key:?}: buckets are not cumulative"));
            }
            last = (le, count);
        }
        if last.0 != f64::INFINITY {
            return Err(format!("{name} {key:?}: no +Inf bucket"));
        }
        if counts.get(key) != Some(&last.1) {
            return Err(format!("{name} {key:?}: the +Inf bucket is not the count"));
        }
    }
    Ok(())
}

/// Scrapes `http://{addr}/metrics` and parses it strictly; panics on anything else.
pub async fn scrape(addr: &str) -> Exposition {
    platform::outbound::install_crypto_provider();
    let answer = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("the metrics answer");
    assert_eq!(answer.status(), 200, "the metrics status");
    let content_type = answer
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "content type {content_type}"
    );
    let text = answer.text().await.expect("the metrics text");
    parse(&text).unwrap_or_else(|err| panic!("not Prometheus text: {err}\n{text}"))
}

/// A free loopback address for `METRICS_BIND`.
pub fn free_address() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    format!("127.0.0.1:{port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_formed_exposition_is_read_and_a_broken_one_is_refused() {
        let good = "# HELP a x\n# TYPE a counter\na_total{k=\"v\\\"w\"} 2\n# TYPE h histogram\nh_bucket{le=\"1.0\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3.5\nh_count 2\n# EOF\n";
        let read = parse(good).expect("good");
        assert_eq!(read.value("a_total", &[("k", "v\"w")]), Some(2.0));
        for bad in [
            "# TYPE a counter\na 1\n# EOF\n",
            "# TYPE a counter\na_total 1\n",
            "# TYPE a counter\na_total{k=\"v\",k=\"w\"} 1\n# EOF\n",
            "# TYPE a gauge\na{k=v} 1\n# EOF\n",
            "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n# EOF\n",
            "b 1\n# EOF\n",
        ] {
            assert!(parse(bad).is_err(), "accepted {bad:?}");
        }
    }
}
