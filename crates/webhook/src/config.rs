//! The webhook's configuration file (`RolloutConfiguration`, `gantry.io/v1alpha1`) and the
//! share type shared by the file and the annotations.

use std::fmt;
use std::path::Path;

use serde::Deserialize;

use gantry_core::config::{ConfigError, decode, names, read_file};
use gantry_core::model::echo::echo;

/// The `apiVersion` of the file.
pub const API_VERSION: &str = "gantry.io/v1alpha1";
/// The `kind` of the file.
pub const KIND: &str = "RolloutConfiguration";
/// The scheduler name that means "the default scheduler" (also what an empty one defaults to).
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";
/// The namespaces excluded when the file names none.
pub const DEFAULT_EXCLUDED_NAMESPACES: [&str; 1] = ["kube-system"];

/// Buckets of the sticky split: a share is a number of buckets out of this many, so shares
/// have a resolution of 0.01%.
pub const BUCKETS: u16 = 10_000;

/// A share of workloads, in hundredths of a percent (0..=10000): "30%" is 3000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Share(u16);

/// A share that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid share {value}: {reason}")]
pub struct ShareError {
    /// The value as written, quoted and cut to a bounded size (an annotation can be long).
    pub value: String,
    /// What is wrong.
    pub reason: &'static str,
}

impl Share {
    /// No workload.
    pub const NONE: Share = Share(0);
    /// Every workload.
    pub const ALL: Share = Share(BUCKETS);

    /// The share in buckets (hundredths of a percent).
    pub fn buckets(self) -> u16 {
        self.0
    }

    /// A share of `percent` percent; None above 100.
    pub fn from_percent(percent: u64) -> Option<Share> {
        (percent <= 100).then(|| Share(percent as u16 * 100))
    }

    /// Parses a percentage as written in the file and the annotations: digits, at most two
    /// decimals, then `%`, from `0%` to `100%` (`30%`, `12.5%`, `0.25%`). Nothing else is
    /// accepted: no sign, no spaces, no fraction like `0.3`, no bare number.
    pub fn parse(text: &str) -> Result<Share, ShareError> {
        let error = |reason| ShareError {
            value: echo(text).to_string(),
            reason,
        };
        let Some(number) = text.strip_suffix('%') else {
            return Err(error("expected a percentage such as \"30%\""));
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || (number.contains('.') && !digits(fraction)) {
            return Err(error("expected a percentage such as \"30%\""));
        }
        if fraction.len() > 2 {
            return Err(error("at most two decimals (0.01% steps)"));
        }
        if whole.len() > 3 {
            return Err(error("must be between 0% and 100%"));
        }
        let whole: u32 = whole
            .parse()
            .map_err(|_| error("expected a percentage such as \"30%\""))?;
        let hundredths: u32 = match fraction.len() {
            0 => 0,
            1 => fraction.parse::<u32>().unwrap_or(0) * 10,
            _ => fraction.parse::<u32>().unwrap_or(0),
        };
        let buckets = whole * 100 + hundredths;
        if buckets > u32::from(BUCKETS) {
            return Err(error("must be between 0% and 100%"));
        }
        Ok(Share(buckets as u16))
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, hundredths) = (self.0 / 100, self.0 % 100);
        match hundredths {
            0 => write!(f, "{whole}%"),
            h if h % 10 == 0 => write!(f, "{whole}.{}%", h / 10),
            h => write!(f, "{whole}.{h:02}%"),
        }
    }
}

impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Share;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a percentage such as \"30%\", or an integer from 0 to 100")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Share, E> {
                Share::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Share, E> {
                Share::from_percent(v).ok_or_else(|| {
                    E::custom(format!("invalid share {v}: must be between 0 and 100"))
                })
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Share, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!(
                        "invalid share {v}: must be between 0 and 100"
                    ))),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    api_version: Option<String>,
    kind: Option<String>,
    share: Option<Share>,
    scheduler_name: Option<String>,
    excluded_namespaces: Option<Vec<String>>,
}

/// The webhook's configuration, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutConfig {
    /// The share of workloads sent to gantry where no annotation says otherwise (`share`,
    /// default 0%: nothing moves until asked).
    pub share: Share,
    /// The scheduler name (gantry's profile) written into the pods sent to gantry
    /// (`schedulerName`, required).
    pub scheduler_name: String,
    /// Namespaces whose pods are never touched (`excludedNamespaces`, default `[kube-system]`;
    /// a list given replaces the default).
    pub excluded_namespaces: Vec<String>,
}

/// `error` without the position serde_yaml appends to its messages (`at line 3 column 8`):
/// the field path says more.
fn without_position(error: ConfigError) -> ConfigError {
    match error {
        ConfigError::Field { field, reason } => match reason.split_once(" at line ") {
            Some((reason, _)) => ConfigError::field(field, reason),
            None => ConfigError::Field { field, reason },
        },
        other => other,
    }
}

impl RolloutConfig {
    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<RolloutConfig, ConfigError> {
        RolloutConfig::parse(&read_file(path)?)
    }

    /// Parses and validates configuration text (YAML or JSON).
    pub fn parse(text: &str) -> Result<RolloutConfig, ConfigError> {
        let file: File = decode(text).map_err(without_position)?;
        match file.api_version.as_deref() {
            Some(API_VERSION) => {}
            Some(other) => {
                return Err(ConfigError::field(
                    "apiVersion",
                    format!("must be {API_VERSION}, not {}", echo(other)),
                ));
            }
            None => {
                return Err(ConfigError::field(
                    "apiVersion",
                    format!("required ({API_VERSION})"),
                ));
            }
        }
        match file.kind.as_deref() {
            Some(KIND) => {}
            Some(other) => {
                return Err(ConfigError::field(
                    "kind",
                    format!("must be {KIND}, not {}", echo(other)),
                ));
            }
            None => return Err(ConfigError::field("kind", format!("required ({KIND})"))),
        }
        let scheduler_name = match file.scheduler_name {
            None => {
                return Err(ConfigError::field(
                    "schedulerName",
                    "required: the scheduler name of gantry's profile",
                ));
            }
            Some(name) if name.is_empty() => {
                return Err(ConfigError::field("schedulerName", "must not be empty"));
            }
            Some(name) if name == DEFAULT_SCHEDULER => {
                return Err(ConfigError::field(
                    "schedulerName",
                    format!("must name gantry's profile, not {DEFAULT_SCHEDULER}"),
                ));
            }
            // Written into pods' spec.schedulerName, which the API server checks: a name
            // it refuses would make every pod sent to gantry fail to be created.
            Some(name) => {
                names::dns_subdomain(&name).map_err(|e| ConfigError::field("schedulerName", e))?;
                name
            }
        };
        let excluded_namespaces = match file.excluded_namespaces {
            None => DEFAULT_EXCLUDED_NAMESPACES.map(String::from).to_vec(),
            Some(list) => {
                for (i, namespace) in list.iter().enumerate() {
                    let field = format!("excludedNamespaces[{i}]");
                    if namespace.is_empty() {
                        return Err(ConfigError::field(field, "must not be empty"));
                    }
                    names::dns_label(namespace).map_err(|e| ConfigError::field(field, e))?;
                }
                list
            }
        };
        Ok(RolloutConfig {
            share: file.share.unwrap_or(Share::NONE),
            scheduler_name,
            excluded_namespaces,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(s: &str) -> u16 {
        Share::parse(s).expect(s).buckets()
    }

    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        let e = RolloutConfig::parse(&format!(
            "apiVersion: gantry.io/v1alpha1\nkind: RolloutConfiguration\nschedulerName: g\nexcludedNamespaces: {}\n",
            "[".repeat(100_000)
        ))
        .unwrap_err();
        assert_eq!(e.to_string(), "nested deeper than 128 levels at line 4");
    }

    #[test]
    fn shares_parse_strictly() {
        assert_eq!(share("0%"), 0);
        assert_eq!(share("30%"), 3000);
        assert_eq!(share("100%"), 10_000);
        assert_eq!(share("12.5%"), 1250);
        assert_eq!(share("0.25%"), 25);
        assert_eq!(share("0.01%"), 1);
        assert_eq!(share("100.00%"), 10_000);
        assert_eq!(share("007%"), 700);
        for bad in [
            "", "%", "30", "abc", "130%", "100.01%", "1000%", "-5%", "+5%", " 30%", "30 %", "30%%",
            "0.3", ".5%", "5.%", "1.234%", "1e2%", "３0%",
        ] {
            assert!(Share::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            Share::parse("130%").unwrap_err().to_string(),
            "invalid share \"130%\": must be between 0% and 100%"
        );
        assert_eq!(
            Share::parse("abc").unwrap_err().to_string(),
            "invalid share \"abc\": expected a percentage such as \"30%\""
        );
    }

    #[test]
    fn shares_print_as_written() {
        for s in ["0%", "30%", "100%", "12.5%", "0.25%", "0.01%"] {
            assert_eq!(Share::parse(s).unwrap().to_string(), s);
        }
    }

    const HEAD: &str = "apiVersion: gantry.io/v1alpha1\nkind: RolloutConfiguration\n";

    #[test]
    fn a_full_file() {
        let c = RolloutConfig::parse(&format!(
            "{HEAD}share: \"30%\"\nschedulerName: gantry\nexcludedNamespaces: [kube-system, gantry-system]\n"
        ))
        .unwrap();
        assert_eq!(
            c,
            RolloutConfig {
                share: Share(3000),
                scheduler_name: "gantry".into(),
                excluded_namespaces: vec!["kube-system".into(), "gantry-system".into()],
            }
        );
    }

    #[test]
    fn defaults_and_integer_shares() {
        let c = RolloutConfig::parse(&format!("{HEAD}schedulerName: gantry\n")).unwrap();
        assert_eq!(c.share, Share::NONE);
        assert_eq!(c.excluded_namespaces, vec!["kube-system".to_string()]);
        let c = RolloutConfig::parse(&format!("{HEAD}schedulerName: g\nshare: 45\n")).unwrap();
        assert_eq!(c.share.buckets(), 4500);
        let c = RolloutConfig::parse(&format!("{HEAD}schedulerName: g\nexcludedNamespaces: []\n"))
            .unwrap();
        assert!(c.excluded_namespaces.is_empty());
    }

    fn error(body: &str) -> String {
        RolloutConfig::parse(&format!("{HEAD}{body}"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            error("schedulerName: g\nshare: \"130%\"\n"),
            "share: invalid share \"130%\": must be between 0% and 100%"
        );
        assert_eq!(
            error("schedulerName: g\nshare: abc\n"),
            "share: invalid share \"abc\": expected a percentage such as \"30%\""
        );
        assert_eq!(
            error("schedulerName: g\nshare: 101\n"),
            "share: invalid share 101: must be between 0 and 100"
        );
        assert_eq!(
            error("schedulerName: g\nshare: -1\n"),
            "share: invalid share -1: must be between 0 and 100"
        );
        assert!(error("schedulerName: g\nshare: 0.3\n").starts_with("share: invalid type"));
        let unknown = error("schedulerName: g\nshares: 30\n");
        assert!(
            unknown.starts_with("shares: unknown field `shares`"),
            "{unknown}"
        );
        assert_eq!(
            error("share: 30\n"),
            "schedulerName: required: the scheduler name of gantry's profile"
        );
        assert_eq!(
            error("schedulerName: \"\"\n"),
            "schedulerName: must not be empty"
        );
        assert_eq!(
            error("schedulerName: default-scheduler\n"),
            "schedulerName: must name gantry's profile, not default-scheduler"
        );
        assert_eq!(
            error("schedulerName: g\nexcludedNamespaces: [a, \"\"]\n"),
            "excludedNamespaces[1]: must not be empty"
        );
        assert!(
            error("schedulerName: g\nexcludedNamespaces: a\n")
                .starts_with("excludedNamespaces: invalid type")
        );
        assert_eq!(
            RolloutConfig::parse("kind: RolloutConfiguration\nschedulerName: g\n")
                .unwrap_err()
                .to_string(),
            "apiVersion: required (gantry.io/v1alpha1)"
        );
        assert_eq!(
            RolloutConfig::parse(
                "apiVersion: gantry.io/v1\nkind: RolloutConfiguration\nschedulerName: g\n"
            )
            .unwrap_err()
            .to_string(),
            "apiVersion: must be gantry.io/v1alpha1, not \"gantry.io/v1\""
        );
        assert_eq!(
            RolloutConfig::parse("apiVersion: gantry.io/v1alpha1\nkind: Other\nschedulerName: g\n")
                .unwrap_err()
                .to_string(),
            "kind: must be RolloutConfiguration, not \"Other\""
        );
    }

    #[test]
    fn names_are_what_the_api_server_accepts() {
        let e = error("schedulerName: Gantry_Batch\n");
        assert!(
            e.starts_with("schedulerName: \"Gantry_Batch\" must be a lowercase RFC 1123 subdomain"),
            "{e}"
        );
        let e = error("schedulerName: g\nexcludedNamespaces: [kube-system, gantry.system]\n");
        assert!(
            e.starts_with(
                "excludedNamespaces[1]: \"gantry.system\" must be a lowercase RFC 1123 label"
            ),
            "{e}"
        );
        assert!(RolloutConfig::parse(&format!("{HEAD}schedulerName: gantry.batch-1\n")).is_ok());
    }

    #[test]
    fn long_values_are_cut_and_a_byte_order_mark_is_accepted() {
        let long = format!("{}%", "9".repeat(100_000));
        assert_eq!(
            Share::parse(&long).unwrap_err().to_string(),
            format!(
                "invalid share \"{}\"... (100001 bytes): must be between 0% and 100%",
                "9".repeat(64)
            )
        );
        let e = error(&format!("schedulerName: g\nshare: \"{long}\"\n"));
        assert!(e.len() < 200, "{e}");
        let c = RolloutConfig::parse(&format!("\u{feff}{HEAD}schedulerName: g\n")).unwrap();
        assert_eq!(c.scheduler_name, "g");
    }
}
