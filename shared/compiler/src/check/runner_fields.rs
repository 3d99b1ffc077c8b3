//! The values of runner settings, checked where the platform's rules are
//! fixed and known: Fargate task sizes, Cloud Run CPU and memory limits,
//! the shapes of AWS ids and ARNs, Google Cloud project and region names,
//! Kubernetes names. Every error says what is accepted.
//!
//! Checks stop at shape: whether a subnet or a project exists is for the
//! platform to say when a job starts.

/// Fargate CPU units, with the vCPUs they are.
const FARGATE_CPUS: [(u32, &str); 7] = [
    (256, "¼ vCPU"),
    (512, "½ vCPU"),
    (1024, "1 vCPU"),
    (2048, "2 vCPU"),
    (4096, "4 vCPU"),
    (8192, "8 vCPU"),
    (16384, "16 vCPU"),
];

/// Fargate CPU units, as written (`cpu: 1024`).
pub(super) fn fargate_cpu(raw: &str) -> Result<u32, String> {
    raw.trim()
        .parse::<u32>()
        .ok()
        .filter(|cpu| FARGATE_CPUS.iter().any(|(c, _)| c == cpu))
        .ok_or_else(|| {
            format!(
                "cpu {raw:?} is not a Fargate CPU size: write CPU units, one of 256 (¼ vCPU), 512, 1024 (1 vCPU), 2048, 4096, 8192 or 16384"
            )
        })
}

/// Fargate memory in MiB, as written (`memory: 2048`).
pub(super) fn fargate_memory(raw: &str) -> Result<u32, String> {
    raw.trim()
        .parse::<u32>()
        .ok()
        .filter(|memory| *memory > 0)
        .ok_or_else(|| {
            format!("memory {raw:?} is not a size in MiB: write a number such as 512, 2048 or 8192")
        })
}

/// The memory sizes (MiB) Fargate offers with `cpu` units, smallest first.
fn fargate_memories(cpu: u32) -> Vec<u32> {
    let steps = |from: u32, to: u32, step: usize| (from..=to).step_by(step).collect();
    match cpu {
        256 => vec![512, 1024, 2048],
        512 => steps(1024, 4096, 1024),
        1024 => steps(2048, 8192, 1024),
        2048 => steps(4096, 16384, 1024),
        4096 => steps(8192, 30720, 1024),
        8192 => steps(16384, 61440, 4096),
        16384 => steps(32768, 122880, 8192),
        _ => Vec::new(),
    }
}

/// The memory of a Fargate task with `cpu` units: `memory` when Fargate
/// offers it with that CPU, the smallest it offers when not given.
pub(super) fn fargate_size(cpu: u32, memory: Option<u32>) -> Result<u32, String> {
    let offered = fargate_memories(cpu);
    let vcpu = FARGATE_CPUS
        .iter()
        .find(|(c, _)| *c == cpu)
        .map_or("", |(_, v)| v);
    let described = match offered.as_slice() {
        [a, b, c] => format!("{a}, {b} or {c}"),
        [first, second, .., last] => {
            format!("{first} to {last} in steps of {}", second - first)
        }
        _ => return Err(format!("cpu {cpu} is not a Fargate CPU size")),
    };
    match memory {
        None => Ok(offered[0]),
        Some(memory) if offered.contains(&memory) => Ok(memory),
        Some(memory) => Err(format!(
            "Fargate has no task size with cpu {cpu} and memory {memory}: cpu {cpu} ({vcpu}) takes memory {described} (MiB)"
        )),
    }
}

/// A Cloud Run CPU limit in millicores: 1, 2, 4, 6 or 8 CPUs, or a
/// fraction from 0.08 to 1 (`0.5`, or `500m`).
pub(super) fn cloud_run_cpu(raw: &str) -> Result<u32, String> {
    match cpu_millis(raw.trim()) {
        Some(m) if (80..=1000).contains(&m) || [2000, 4000, 6000, 8000].contains(&m) => Ok(m),
        _ => Err(format!(
            "cpu {raw:?} is not a Cloud Run CPU limit: write 1, 2, 4, 6 or 8, or a fraction from 0.08 to 1 such as 0.5"
        )),
    }
}

fn cpu_millis(raw: &str) -> Option<u32> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(millis) = raw.strip_suffix('m') {
        return digits(millis).then(|| millis.parse().ok()).flatten();
    }
    let (whole, fraction) = raw.split_once('.').unwrap_or((raw, "0"));
    if !digits(whole) || !digits(fraction) || fraction.len() > 3 {
        return None;
    }
    let fraction: u32 = format!("{fraction:0<3}").parse().ok()?;
    whole
        .parse::<u32>()
        .ok()?
        .checked_mul(1000)?
        .checked_add(fraction)
}

/// A Cloud Run memory limit in MiB: a number of Mi or Gi from 512Mi to 32Gi.
pub(super) fn cloud_run_memory(raw: &str) -> Result<u32, String> {
    let trimmed = raw.trim();
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    let mib = match (trimmed.strip_suffix("Gi"), trimmed.strip_suffix("Mi")) {
        (Some(gib), _) => number(gib).and_then(|g| g.checked_mul(1024)),
        (_, Some(mib)) => number(mib),
        _ => None,
    };
    match mib {
        Some(mib) if (512..=32 * 1024).contains(&mib) => Ok(mib),
        _ => Err(format!(
            "memory {raw:?} is not a Cloud Run memory limit: write a size in Mi or Gi from 512Mi to 32Gi, such as 512Mi or 2Gi"
        )),
    }
}

/// Cloud Run's defaults: 1 CPU, 512Mi.
const CLOUD_RUN_DEFAULT_CPU: u32 = 1000;
const CLOUD_RUN_DEFAULT_MEMORY: u32 = 512;

/// Checks a Cloud Run CPU limit and memory limit against each other (Cloud
/// Run's default for the one not given); the error names both.
pub(super) fn cloud_run_size(cpu: Option<u32>, memory: Option<u32>) -> Result<(), String> {
    let default = |given: Option<u32>| {
        if given.is_some() {
            ""
        } else {
            " (the default)"
        }
    };
    let (cpu_millis, memory_mib) = (
        cpu.unwrap_or(CLOUD_RUN_DEFAULT_CPU),
        memory.unwrap_or(CLOUD_RUN_DEFAULT_MEMORY),
    );
    let cpu_needed = match memory_mib {
        m if m > 24 * 1024 => 8000,
        m if m > 16 * 1024 => 6000,
        m if m > 8 * 1024 => 4000,
        m if m > 4 * 1024 => 2000,
        m if m > 1024 => 1000,
        m if m > 512 => 500,
        _ => 0,
    };
    if cpu_millis < cpu_needed {
        return Err(format!(
            "Cloud Run gives memory {} only with at least {} CPU; cpu is {}{}",
            show_mib(memory_mib),
            show_millis(cpu_needed),
            show_millis(cpu_millis),
            default(cpu)
        ));
    }
    let memory_needed = match cpu_millis {
        6000 | 8000 => 4096,
        4000 => 2048,
        _ => 0,
    };
    if memory_mib < memory_needed {
        return Err(format!(
            "Cloud Run gives {} CPU only with at least {} of memory; memory is {}{}",
            show_millis(cpu_millis),
            show_mib(memory_needed),
            show_mib(memory_mib),
            default(memory)
        ));
    }
    Ok(())
}

fn show_millis(millis: u32) -> String {
    if millis.is_multiple_of(1000) {
        (millis / 1000).to_string()
    } else {
        format!("{}", f64::from(millis) / 1000.0)
    }
}

fn show_mib(mib: u32) -> String {
    if mib.is_multiple_of(1024) {
        format!("{}Gi", mib / 1024)
    } else {
        format!("{mib}Mi")
    }
}

/// The parts of an ARN: `arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE`.
pub(super) struct Arn<'a> {
    pub(super) service: &'a str,
    pub(super) region: &'a str,
    pub(super) account: &'a str,
    pub(super) resource: &'a str,
}

impl<'a> Arn<'a> {
    /// The parts of `raw` when it is an ARN of an AWS partition with a
    /// 12-digit account (every ARN Vergence is given has one).
    pub(super) fn parse(raw: &'a str) -> Option<Self> {
        let mut parts = raw.splitn(6, ':');
        let (prefix, partition) = (parts.next()?, parts.next()?);
        let arn = Arn {
            service: parts.next()?,
            region: parts.next()?,
            account: parts.next()?,
            resource: parts.next()?,
        };
        let account_ok = arn.account.len() == 12 && arn.account.bytes().all(|b| b.is_ascii_digit());
        (prefix == "arn" && partition.starts_with("aws") && account_ok).then_some(arn)
    }

    /// The name after `prefix` in the resource (`role/`, `cluster/`), when
    /// the ARN is of `service` and the name is not empty.
    pub(super) fn resource_name(&self, service: &str, prefix: &str) -> Option<&'a str> {
        let name = self.resource.strip_prefix(prefix)?;
        (self.service == service && !name.is_empty()).then_some(name)
    }
}

/// `eu-west-1`, `us-gov-west-1`: a two-letter area, words, a number.
pub(super) fn check_aws_region(raw: &str) -> Result<(), String> {
    let parts: Vec<&str> = raw.split('-').collect();
    let valid = parts.len() >= 3
        && parts[0].len() == 2
        && parts[0].bytes().all(|b| b.is_ascii_lowercase())
        && parts[1..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts
            .last()
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "region {raw:?} is not an AWS region: write one like eu-west-1 or us-east-1"
        ))
    }
}

/// An ECS cluster's name or ARN.
pub(super) fn check_ecs_cluster(raw: &str) -> Result<(), String> {
    let valid = if raw.starts_with("arn:") {
        Arn::parse(raw).is_some_and(|arn| arn.resource_name("ecs", "cluster/").is_some())
    } else {
        (1..=255).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if valid {
        Ok(())
    } else {
        Err(format!(
            "cluster {raw:?} is not an ECS cluster: write its name (letters, digits, '-' and '_') or its ARN, arn:aws:ecs:REGION:ACCOUNT:cluster/NAME"
        ))
    }
}

/// An AWS resource id such as `subnet-0123456789abcdef0`: a prefix and hex.
fn aws_id(raw: &str, prefix: &str) -> bool {
    raw.strip_prefix(prefix)
        .is_some_and(|hex| !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

pub(super) fn check_subnet(raw: &str) -> Result<(), String> {
    if aws_id(raw, "subnet-") {
        Ok(())
    } else {
        Err(format!(
            "{raw:?} is not a subnet id: write one like subnet-0123456789abcdef0"
        ))
    }
}

pub(super) fn check_security_group(raw: &str) -> Result<(), String> {
    if aws_id(raw, "sg-") {
        Ok(())
    } else {
        Err(format!(
            "{raw:?} is not a security group id: write one like sg-0123456789abcdef0"
        ))
    }
}

/// `taskRoleArn`, `executionRoleArn`: an IAM role's ARN.
pub(super) fn check_role_arn(field: &str, raw: &str) -> Result<(), String> {
    let valid = Arn::parse(raw)
        .is_some_and(|arn| arn.region.is_empty() && arn.resource_name("iam", "role/").is_some());
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{field} {raw:?} is not an IAM role ARN: write arn:aws:iam::ACCOUNT:role/NAME"
        ))
    }
}

/// A CloudWatch Logs group name.
pub(super) fn check_log_group(raw: &str) -> Result<(), String> {
    let valid = (1..=512).contains(&raw.len())
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-/.#".contains(&b));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "logGroup {raw:?} is not a CloudWatch Logs group name: use letters, digits and _ - / . #, at most 512 characters"
        ))
    }
}

/// A Google Cloud project id (`my-project`, or `example.com:my-project`)
/// or project number.
pub(super) fn check_gcp_project(raw: &str) -> Result<(), String> {
    let id = raw.rsplit_once(':').map_or(raw, |(_, id)| id);
    let number = !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit());
    let valid_id = (6..=30).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_lowercase())
        && !id.ends_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if number || valid_id {
        Ok(())
    } else {
        Err(format!(
            "project {raw:?} is not a Google Cloud project id: 6 to 30 lowercase letters, digits and '-', starting with a letter (the id, not the display name)"
        ))
    }
}

/// A Google Cloud region: `europe-west1`, `us-central1`.
pub(super) fn check_gcp_region(raw: &str) -> Result<(), String> {
    let valid = raw.split_once('-').is_some_and(|(area, rest)| {
        let letters = rest.trim_end_matches(|c: char| c.is_ascii_digit());
        !area.is_empty()
            && area.bytes().all(|b| b.is_ascii_lowercase())
            && !letters.is_empty()
            && letters.len() < rest.len()
            && letters.bytes().all(|b| b.is_ascii_lowercase())
    });
    if valid {
        Ok(())
    } else {
        Err(format!(
            "region {raw:?} is not a Cloud Run region: write one like europe-west1 or us-central1 (a region, not a zone)"
        ))
    }
}

/// A service account's email.
pub(super) fn check_gcp_service_account(raw: &str) -> Result<(), String> {
    let valid = raw.split_once('@').is_some_and(|(name, domain)| {
        !name.is_empty()
            && domain.contains('.')
            && !domain.contains('@')
            && !raw.chars().any(char::is_whitespace)
    });
    if valid {
        Ok(())
    } else {
        Err(format!(
            "serviceAccount {raw:?} is not a service account email: write one like jobs@my-project.iam.gserviceaccount.com"
        ))
    }
}

/// A DNS label (RFC 1123), as Kubernetes names namespaces.
pub(super) fn check_dns_label(field: &str, raw: &str) -> Result<(), String> {
    if raw.len() <= 63 && dns_name(raw, false) {
        Ok(())
    } else {
        Err(format!(
            "{field} {raw:?} is not a Kubernetes name: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
        ))
    }
}

/// A DNS subdomain (RFC 1123), as Kubernetes names service accounts and
/// Secrets.
pub(super) fn check_dns_subdomain(field: &str, raw: &str) -> Result<(), String> {
    if raw.len() <= 253 && dns_name(raw, true) {
        Ok(())
    } else {
        Err(format!(
            "{field} {raw:?} is not a Kubernetes name: at most 253 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
        ))
    }
}

fn dns_name(raw: &str, dots: bool) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    raw.starts_with(alnum)
        && raw.ends_with(alnum)
        && raw
            .chars()
            .all(|c| alnum(c) || c == '-' || (dots && c == '.'))
}

/// A Lambda function's name, or its ARN (with or without a version or
/// alias).
pub(super) fn check_lambda_function(raw: &str) -> Result<(), String> {
    let name_ok = |name: &str| {
        (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let valid = if raw.starts_with("arn:") {
        Arn::parse(raw).is_some_and(|arn| {
            let (name, qualifier) = arn
                .resource
                .strip_prefix("function:")
                .map(|rest| {
                    rest.split_once(':')
                        .map_or((rest, None), |(n, q)| (n, Some(q)))
                })
                .unwrap_or(("", None));
            arn.service == "lambda"
                && !arn.region.is_empty()
                && name_ok(name)
                && qualifier.is_none_or(|q| check_lambda_qualifier(q).is_ok())
        })
    } else {
        name_ok(raw)
    };
    if valid {
        Ok(())
    } else {
        Err(format!(
            "function {raw:?} is not a Lambda function: write its name (letters, digits, '-' and '_', at most 64) or its ARN, arn:aws:lambda:REGION:ACCOUNT:function:NAME"
        ))
    }
}

/// The region of a Lambda function ARN, and whether it names a version
/// or alias; `None` for a plain name.
pub(super) fn lambda_arn_parts(raw: &str) -> Option<(&str, bool)> {
    let arn = Arn::parse(raw)?;
    let rest = arn.resource.strip_prefix("function:")?;
    Some((arn.region, rest.contains(':')))
}

/// A Lambda version (digits or `$LATEST`) or alias name.
pub(super) fn check_lambda_qualifier(raw: &str) -> Result<(), String> {
    let valid = raw == "$LATEST"
        || ((1..=128).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "qualifier {raw:?} is not a Lambda version or alias: write a version number, $LATEST, or an alias name (letters, digits, '-' and '_')"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fargate_sizes_follow_the_published_table() {
        assert_eq!(fargate_size(256, None), Ok(512));
        assert_eq!(fargate_size(1024, None), Ok(2048));
        assert_eq!(fargate_size(256, Some(2048)), Ok(2048));
        assert_eq!(fargate_size(4096, Some(30720)), Ok(30720));
        assert_eq!(fargate_size(8192, Some(20480)), Ok(20480));
        assert!(fargate_size(8192, Some(17408)).is_err());
        assert_eq!(fargate_size(16384, Some(122880)), Ok(122880));
        assert_eq!(
            fargate_size(256, Some(4096)),
            Err("Fargate has no task size with cpu 256 and memory 4096: cpu 256 (¼ vCPU) takes memory 512, 1024 or 2048 (MiB)".into())
        );
        assert_eq!(
            fargate_size(1024, Some(1024)),
            Err("Fargate has no task size with cpu 1024 and memory 1024: cpu 1024 (1 vCPU) takes memory 2048 to 8192 in steps of 1024 (MiB)".into())
        );
        assert!(fargate_cpu("1 vCPU").is_err());
        assert!(fargate_cpu("300").is_err());
        assert_eq!(fargate_cpu("2048"), Ok(2048));
        assert!(fargate_memory("2GB").is_err());
    }

    #[test]
    fn cloud_run_limits_are_read_as_cloud_run_writes_them() {
        assert_eq!(cloud_run_cpu("1"), Ok(1000));
        assert_eq!(cloud_run_cpu("0.5"), Ok(500));
        assert_eq!(cloud_run_cpu("500m"), Ok(500));
        assert_eq!(cloud_run_cpu("0.08"), Ok(80));
        assert!(cloud_run_cpu("3").is_err());
        assert!(cloud_run_cpu("0.05").is_err());
        assert!(cloud_run_cpu("1.5").is_err());
        assert!(cloud_run_cpu("0.0001").is_err());
        assert_eq!(cloud_run_memory("512Mi"), Ok(512));
        assert_eq!(cloud_run_memory("2Gi"), Ok(2048));
        assert!(cloud_run_memory("2GB").is_err());
        assert!(cloud_run_memory("256Mi").is_err());
        assert!(cloud_run_memory("64Gi").is_err());
        assert_eq!(cloud_run_size(Some(4000), Some(2048)), Ok(()));
        assert_eq!(cloud_run_size(None, None), Ok(()));
        assert_eq!(
            cloud_run_size(None, Some(8192)),
            Err(
                "Cloud Run gives memory 8Gi only with at least 2 CPU; cpu is 1 (the default)"
                    .into()
            )
        );
        assert_eq!(
            cloud_run_size(Some(4000), None),
            Err("Cloud Run gives 4 CPU only with at least 2Gi of memory; memory is 512Mi (the default)".into())
        );
        assert!(cloud_run_size(Some(250), Some(1024)).is_err());
    }

    #[test]
    fn aws_names_and_arns_have_their_shapes() {
        assert!(check_aws_region("eu-west-1").is_ok());
        assert!(check_aws_region("us-gov-west-1").is_ok());
        assert!(check_aws_region("eu-west").is_err());
        assert!(check_aws_region("europe-west1").is_err());
        assert!(check_ecs_cluster("prod_jobs-1").is_ok());
        assert!(check_ecs_cluster("arn:aws:ecs:eu-west-1:123456789012:cluster/jobs").is_ok());
        assert!(check_ecs_cluster("arn:aws:ecs:eu-west-1:123456789012:service/jobs").is_err());
        assert!(check_ecs_cluster("prod jobs").is_err());
        assert!(check_subnet("subnet-0123456789abcdef0").is_ok());
        assert!(check_subnet("subnet-xyz").is_err());
        assert!(check_security_group("sg-0a1b").is_ok());
        assert!(check_security_group("subnet-0a1b").is_err());
        let role = "arn:aws:iam::123456789012:role/jobs";
        assert!(check_role_arn("taskRoleArn", role).is_ok());
        assert!(check_role_arn("taskRoleArn", "arn:aws-cn:iam::123456789012:role/a/b").is_ok());
        assert!(check_role_arn("taskRoleArn", "arn:aws:iam::123456789012:user/jobs").is_err());
        assert!(check_role_arn("taskRoleArn", "arn:aws:iam::1234:role/jobs").is_err());
        assert!(check_role_arn("taskRoleArn", "jobs").is_err());
        assert!(check_log_group("/vergence/jobs").is_ok());
        assert!(check_log_group("has space").is_err());
    }

    #[test]
    fn google_cloud_and_kubernetes_names_have_their_shapes() {
        assert!(check_gcp_project("my-project").is_ok());
        assert!(check_gcp_project("example.com:my-project").is_ok());
        assert!(check_gcp_project("123456789012").is_ok());
        assert!(check_gcp_project("My Project").is_err());
        assert!(check_gcp_project("proj").is_err());
        assert!(check_gcp_region("europe-west1").is_ok());
        assert!(check_gcp_region("northamerica-northeast2").is_ok());
        assert!(check_gcp_region("europe-west1-b").is_err());
        assert!(check_gcp_region("eu-west-1").is_err());
        assert!(check_gcp_service_account("jobs@p.iam.gserviceaccount.com").is_ok());
        assert!(check_gcp_service_account("jobs").is_err());
        assert!(check_dns_label("namespace", "jobs-1").is_ok());
        assert!(check_dns_label("namespace", "Jobs").is_err());
        assert!(check_dns_label("namespace", "a.b").is_err());
        assert!(check_dns_subdomain("serviceAccount", "a.b-c").is_ok());
        assert!(check_dns_subdomain("serviceAccount", "-a").is_err());
    }
}
