//! The Lua scripts (one per store call, each atomic on the server) and their arguments.
//!
//! Time is the server's: a script that needs "now" reads `redis.call('TIME')`; open periods
//! and probe permits are key TTLs (`SET … PX`). No client clock is ever sent or compared.
//!
//! Every script names the command's state key as `KEYS[1]` (so a cluster routes it to the
//! slot of the command's hash tag); the other keys it touches share that tag. Bucket keys are
//! derived inside the scripts from the server time, which is why they are not all declared.

use hystrix::circuit::store::{SharedStatus, SharedView};
use redis::{Cmd, Script, ScriptInvocation};

use crate::keys::CommandKeys;

/// `local now = …`: the server's time in ms (TIME is seconds and microseconds).
macro_rules! now_ms {
    () => {
        "local t = redis.call('TIME')\n\
         local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    };
}

/// Status (0 closed, 1 open, 2 half-open) and the generation, from the state and open keys:
/// OPEN while the open key exists (PTTL is not -2; it reads 0 in its last millisecond).
macro_rules! state {
    () => {
        "local gen = tonumber(redis.call('HGET', KEYS[1], 'gen') or '0')\n\
         local tripped = redis.call('HGET', KEYS[1], 'tripped') == '1'\n\
         local remaining = 0\n\
         if tripped then remaining = redis.call('PTTL', KEYS[2]) end\n\
         local status = 0\n\
         if tripped then status = 2 end\n\
         if tripped and remaining ~= -2 then status = 1 end\n"
    };
}

/// KEYS: state, open. ARGV: bucket prefix, bucket ms, buckets, this instance's fingerprint
/// (empty: none). Returns status, remaining ms, generation, requests, errors, reporters, the
/// number of reporters with another fingerprint, and one of them with its fingerprint.
const FETCH: &str = concat!(
    now_ms!(),
    state!(),
    "local bucket_ms = tonumber(ARGV[2])
local current = math.floor(now / bucket_ms)
local requests, errors, reporters, mismatched = 0, 0, 0, 0
local seen, seen_fp, other, other_fp = {}, {}, '', ''
for epoch = current - tonumber(ARGV[3]) + 1, current do
  local fields = redis.call('HGETALL', ARGV[1] .. epoch)
  for i = 1, #fields, 2 do
    local field, value = fields[i], fields[i + 1]
    local kind, name = string.sub(field, 1, 2), string.sub(field, 3)
    if field == 'r' then
      requests = requests + tonumber(value)
    elseif field == 'e' then
      errors = errors + tonumber(value)
    elseif kind == 'i:' and not seen[name] then
      seen[name] = true
      reporters = reporters + 1
    elseif kind == 'f:' and ARGV[4] ~= '' and value ~= ARGV[4] and not seen_fp[name] then
      seen_fp[name] = true
      mismatched = mismatched + 1
      other, other_fp = name, value
    end
  end
end
return {status, math.max(remaining, 0), gen, requests, errors, reporters, mismatched, other, other_fp}
"
);

/// KEYS: state, open, probe. ARGV: expected generation, open ms, state TTL ms, channel,
/// command. Returns the new generation, or 0 if the generation differs or it is OPEN.
const TRIP: &str = concat!(
    state!(),
    "if gen ~= tonumber(ARGV[1]) or status == 1 then return 0 end
local next_gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
redis.call('HSET', KEYS[1], 'tripped', '1')
redis.call('SET', KEYS[2], next_gen, 'PX', ARGV[2])
redis.call('DEL', KEYS[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[2]))
redis.call('PUBLISH', ARGV[4], 'open ' .. next_gen .. ' ' .. ARGV[5])
return next_gen
"
);

/// KEYS: state, open, probe. ARGV: instance, permit ms. Returns 1 if granted (or extended for
/// its holder), 0 if OPEN or held by another instance.
const PROBE: &str = concat!(
    state!(),
    "if status == 1 then return 0 end
if redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"
);

/// KEYS: state, open, probe. ARGV: expected generation, bucket prefix, bucket ms, buckets,
/// state TTL ms, channel, command. Returns the new generation, or 0 if the generation differs
/// or it is CLOSED. Drops the permit and the counts of the window.
const CLOSE: &str = concat!(
    now_ms!(),
    state!(),
    "if gen ~= tonumber(ARGV[1]) or status == 0 then return 0 end
local next_gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
redis.call('HSET', KEYS[1], 'tripped', '0')
redis.call('DEL', KEYS[2], KEYS[3])
local current = math.floor(now / tonumber(ARGV[3]))
for epoch = current - tonumber(ARGV[4]), current do
  redis.call('DEL', ARGV[2] .. epoch)
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PUBLISH', ARGV[6], 'closed ' .. next_gen .. ' ' .. ARGV[7])
return next_gen
"
);

/// KEYS: state. ARGV: bucket prefix, bucket ms, bucket TTL ms, then per report: instance,
/// requests, errors, fingerprint (empty: none). Adds them to the bucket of the server's now.
const PUBLISH: &str = concat!(
    now_ms!(),
    "local bucket = ARGV[1] .. math.floor(now / tonumber(ARGV[2]))
for i = 4, #ARGV, 4 do
  redis.call('HINCRBY', bucket, 'r', ARGV[i + 1])
  redis.call('HINCRBY', bucket, 'e', ARGV[i + 2])
  redis.call('HSET', bucket, 'i:' .. ARGV[i], '1')
  if ARGV[i + 3] ~= '' then redis.call('HSET', bucket, 'f:' .. ARGV[i], ARGV[i + 3]) end
end
redis.call('PEXPIRE', bucket, ARGV[3])
return 1
"
);

/// The scripts, hashed once.
pub(crate) struct Scripts {
    pub(crate) fetch: Script,
    pub(crate) trip: Script,
    pub(crate) probe: Script,
    pub(crate) close: Script,
    pub(crate) publish: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            fetch: Script::new(FETCH),
            trip: Script::new(TRIP),
            probe: Script::new(PROBE),
            close: Script::new(CLOSE),
            publish: Script::new(PUBLISH),
        }
    }
}

/// What the scripts need of the store's configuration.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// Width of a bucket, ms (> 0).
    pub(crate) bucket_ms: u64,
    /// Buckets in the rolling window (> 0).
    pub(crate) buckets: u32,
    /// TTL of a bucket hash: window + slack, ms.
    pub(crate) bucket_ttl_ms: u64,
    /// TTL of the state hash after a transition, ms (a trip adds its open period).
    pub(crate) state_ttl_ms: u64,
    /// Extra ms on every probe permit.
    pub(crate) probe_slack_ms: u64,
    /// The service's transition channel.
    pub(crate) channel: String,
}

/// One script call's `KEYS` and `ARGV`, as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<String>,
}

impl Call {
    /// An invocation of `script` with these keys and arguments (EVALSHA, loading the script
    /// on NOSCRIPT).
    pub(crate) fn invocation<'a>(&self, script: &'a Script) -> ScriptInvocation<'a> {
        let mut invocation = script.prepare_invoke();
        for key in &self.keys {
            invocation.key(key);
        }
        for arg in &self.args {
            invocation.arg(arg);
        }
        invocation
    }

    /// The `EVALSHA` command, for a pipeline (which has no NOSCRIPT reload of its own).
    pub(crate) fn evalsha(&self, script: &Script) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }
}

/// Redis integers are signed: counts beyond `i64::MAX` are clamped.
fn count(n: u64) -> String {
    n.min(i64::MAX as u64).to_string()
}

/// A TTL of at least 1 ms (`PX 0` is an error).
fn ttl(ms: u64) -> String {
    count(ms.max(1))
}

pub(crate) fn fetch(keys: &CommandKeys, layout: &Layout, fingerprint: Option<&str>) -> Call {
    Call {
        keys: vec![keys.state.clone(), keys.open.clone()],
        args: vec![
            keys.bucket_prefix.clone(),
            layout.bucket_ms.to_string(),
            layout.buckets.to_string(),
            fingerprint.unwrap_or_default().to_owned(),
        ],
    }
}

pub(crate) fn trip(
    keys: &CommandKeys,
    layout: &Layout,
    command: &str,
    generation: u64,
    open_for_ms: u64,
) -> Call {
    Call {
        keys: vec![keys.state.clone(), keys.open.clone(), keys.probe.clone()],
        args: vec![
            generation.to_string(),
            ttl(open_for_ms),
            ttl(layout.state_ttl_ms),
            layout.channel.clone(),
            command.to_owned(),
        ],
    }
}

pub(crate) fn probe(keys: &CommandKeys, layout: &Layout, instance: &str, ttl_ms: u64) -> Call {
    Call {
        keys: vec![keys.state.clone(), keys.open.clone(), keys.probe.clone()],
        args: vec![
            instance.to_owned(),
            ttl(ttl_ms.saturating_add(layout.probe_slack_ms)),
        ],
    }
}

pub(crate) fn close(keys: &CommandKeys, layout: &Layout, command: &str, generation: u64) -> Call {
    Call {
        keys: vec![keys.state.clone(), keys.open.clone(), keys.probe.clone()],
        args: vec![
            generation.to_string(),
            keys.bucket_prefix.clone(),
            layout.bucket_ms.to_string(),
            layout.buckets.to_string(),
            ttl(layout.state_ttl_ms),
            layout.channel.clone(),
            command.to_owned(),
        ],
    }
}

/// One instance's counts for a command, with its fingerprint.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Report<'a> {
    pub(crate) instance: &'a str,
    pub(crate) requests: u64,
    pub(crate) errors: u64,
    pub(crate) fingerprint: Option<&'a str>,
}

pub(crate) fn publish(keys: &CommandKeys, layout: &Layout, reports: &[Report<'_>]) -> Call {
    let mut args = Vec::with_capacity(3 + 4 * reports.len());
    args.push(keys.bucket_prefix.clone());
    args.push(layout.bucket_ms.to_string());
    args.push(ttl(layout.bucket_ttl_ms));
    for report in reports {
        args.push(report.instance.to_owned());
        args.push(count(report.requests));
        args.push(count(report.errors));
        args.push(report.fingerprint.unwrap_or_default().to_owned());
    }
    Call {
        keys: vec![keys.state.clone()],
        args,
    }
}

/// The fetch script's reply: status, remaining ms, generation, requests, errors, reporters,
/// reporters with another fingerprint, one of them and its fingerprint.
pub(crate) type FetchReply = (i64, i64, i64, i64, i64, i64, i64, String, String);

/// Another instance's fingerprint, as a fetch found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OtherFingerprint {
    /// Reporters in the window whose fingerprint differs from this instance's.
    pub(crate) instances: u32,
    pub(crate) instance: String,
    pub(crate) fingerprint: String,
}

/// The view a fetch reply describes, and the other fingerprints it found.
pub(crate) fn view(reply: FetchReply) -> (SharedView, Option<OtherFingerprint>) {
    let (status, remaining, generation, requests, errors, reporters, mismatched, other, other_fp) =
        reply;
    let unsigned = |n: i64| u64::try_from(n).unwrap_or(0);
    let status = match status {
        1 => SharedStatus::Open {
            remaining_ms: unsigned(remaining).max(1),
        },
        2 => SharedStatus::HalfOpen,
        _ => SharedStatus::Closed,
    };
    let view = SharedView {
        status,
        generation: unsigned(generation),
        requests: unsigned(requests),
        errors: unsigned(errors),
        reporters: u32::try_from(reporters).unwrap_or(if reporters < 0 { 0 } else { u32::MAX }),
    };
    let other = (mismatched > 0).then(|| OtherFingerprint {
        instances: u32::try_from(mismatched).unwrap_or(u32::MAX),
        instance: other,
        fingerprint: other_fp,
    });
    (view, other)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            bucket_ms: 1_000,
            buckets: 10,
            bucket_ttl_ms: 15_000,
            state_ttl_ms: 86_400_000,
            probe_slack_ms: 250,
            channel: "hystrix:{svc}:transitions".into(),
        }
    }

    fn keys() -> CommandKeys {
        CommandKeys::new("svc", "GetUser")
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn fetch_sends_the_window_and_the_own_fingerprint() {
        let call = fetch(&keys(), &layout(), Some("volume=20"));
        assert_eq!(
            call.keys,
            strings(&["hystrix:{svc:GetUser}:state", "hystrix:{svc:GetUser}:open"])
        );
        assert_eq!(
            call.args,
            strings(&["hystrix:{svc:GetUser}:b:", "1000", "10", "volume=20"])
        );
        assert_eq!(fetch(&keys(), &layout(), None).args[3], "");
    }

    #[test]
    fn trip_and_close_carry_the_generation_channel_and_command() {
        let call = trip(&keys(), &layout(), "GetUser", 3, 5_000);
        assert_eq!(call.keys.len(), 3);
        assert_eq!(call.keys[2], "hystrix:{svc:GetUser}:probe");
        assert_eq!(
            call.args,
            strings(&[
                "3",
                "5000",
                "86400000",
                "hystrix:{svc}:transitions",
                "GetUser"
            ])
        );
        // PX 0 is refused by Redis: an open period is at least 1 ms.
        assert_eq!(trip(&keys(), &layout(), "GetUser", 0, 0).args[1], "1");

        let call = close(&keys(), &layout(), "GetUser", 4);
        assert_eq!(
            call.args,
            strings(&[
                "4",
                "hystrix:{svc:GetUser}:b:",
                "1000",
                "10",
                "86400000",
                "hystrix:{svc}:transitions",
                "GetUser"
            ])
        );
    }

    #[test]
    fn a_probe_permit_lasts_its_ttl_plus_the_slack() {
        let call = probe(&keys(), &layout(), "host-1", 5_000);
        assert_eq!(call.args, strings(&["host-1", "5250"]));
        let call = probe(&keys(), &layout(), "host-1", u64::MAX);
        assert_eq!(call.args[1], i64::MAX.to_string());
    }

    #[test]
    fn publish_lists_each_report_in_fours_and_clamps_counts() {
        let call = publish(
            &keys(),
            &layout(),
            &[
                Report {
                    instance: "a",
                    requests: 10,
                    errors: 4,
                    fingerprint: Some("fp"),
                },
                Report {
                    instance: "b",
                    requests: u64::MAX,
                    errors: 0,
                    fingerprint: None,
                },
            ],
        );
        assert_eq!(call.keys, strings(&["hystrix:{svc:GetUser}:state"]));
        assert_eq!(
            call.args,
            strings(&[
                "hystrix:{svc:GetUser}:b:",
                "1000",
                "15000",
                "a",
                "10",
                "4",
                "fp",
                "b",
                &i64::MAX.to_string(),
                "0",
                ""
            ])
        );
    }

    #[test]
    fn evalsha_names_the_script_hash_and_the_key_count() {
        let scripts = Scripts::new();
        let call = probe(&keys(), &layout(), "a", 10);
        let packed = call.evalsha(&scripts.probe).get_packed_command();
        let text = String::from_utf8_lossy(&packed);
        assert!(text.contains("EVALSHA"), "{text}");
        assert!(text.contains(scripts.probe.get_hash()), "{text}");
        assert!(text.contains("\r\n3\r\n"), "{text}");
    }

    #[test]
    fn replies_become_views() {
        let (view, other) = super::view((1, 4_200, 7, 30, 12, 3, 0, String::new(), String::new()));
        assert_eq!(
            view,
            SharedView {
                status: SharedStatus::Open {
                    remaining_ms: 4_200
                },
                generation: 7,
                requests: 30,
                errors: 12,
                reporters: 3,
            }
        );
        assert_eq!(other, None);
        let (view, other) = super::view((2, 0, 8, 0, 0, 0, 2, "b".into(), "volume=5".into()));
        assert_eq!((view.status, view.generation), (SharedStatus::HalfOpen, 8));
        assert_eq!(
            other,
            Some(OtherFingerprint {
                instances: 2,
                instance: "b".into(),
                fingerprint: "volume=5".into()
            })
        );
        let (view, _) = super::view((0, 0, 0, -1, -1, -1, 0, String::new(), String::new()));
        assert_eq!(view, SharedView::default());
    }
}
