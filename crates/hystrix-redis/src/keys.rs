//! Key and channel names, and the transition messages published on the channel.
//!
//! Every key of a command carries the hash tag `{<service>:<command>}`, so that a script
//! touching several of them works on a Redis Cluster too (one hash slot). Names are
//! percent-encoded inside the tag: `%`, `{`, `}`, `:`, space, control and non-ASCII characters
//! (as UTF-8 bytes), so that no service or command name can end the tag early or make two
//! pairs share a key.

use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

/// What is escaped in a name inside a hash tag.
const IN_TAG: &AsciiSet = &CONTROLS.add(b'%').add(b'{').add(b'}').add(b':').add(b' ');

fn escaped(name: &str) -> String {
    utf8_percent_encode(name, IN_TAG).to_string()
}

/// The keys of one command of one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandKeys {
    /// Hash `gen` (transition counter), `tripped` (`1` from a trip until a close). TTL: the
    /// state TTL, refreshed by every transition.
    pub(crate) state: String,
    /// String (the generation of the trip), present while the shared state is OPEN. TTL: the
    /// open period.
    pub(crate) open: String,
    /// String (the holder's instance name): the probe permit. TTL: the permit's.
    pub(crate) probe: String,
    /// Prefix of the bucket hashes, completed with the bucket's epoch (server time / bucket
    /// width). TTL: window + slack, refreshed by every publish into it.
    pub(crate) bucket_prefix: String,
}

impl CommandKeys {
    pub(crate) fn new(service: &str, command: &str) -> Self {
        let tag = format!("hystrix:{{{}:{}}}", escaped(service), escaped(command));
        CommandKeys {
            state: format!("{tag}:state"),
            open: format!("{tag}:open"),
            probe: format!("{tag}:probe"),
            bucket_prefix: format!("{tag}:b:"),
        }
    }
}

/// The Pub/Sub channel of a service's trips and closes.
pub(crate) fn channel(service: &str) -> String {
    format!("hystrix:{{{}}}:transitions", escaped(service))
}

/// A trip or close heard on the channel. Scripts publish `open <generation> <command>` and
/// `closed <generation> <command>` (the command's name as given, so it may hold spaces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Transition {
    pub(crate) opened: bool,
    pub(crate) generation: u64,
    pub(crate) command: String,
}

impl Transition {
    pub(crate) fn parse(payload: &str) -> Option<Self> {
        let mut parts = payload.splitn(3, ' ');
        let opened = match parts.next()? {
            "open" => true,
            "closed" => false,
            _ => return None,
        };
        let generation = parts.next()?.parse().ok()?;
        let command = parts.next().filter(|c| !c.is_empty())?.to_owned();
        Some(Transition {
            opened,
            generation,
            command,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_command_shares_one_hash_tag() {
        let keys = CommandKeys::new("orders", "GetUser");
        assert_eq!(
            keys,
            CommandKeys {
                state: "hystrix:{orders:GetUser}:state".into(),
                open: "hystrix:{orders:GetUser}:open".into(),
                probe: "hystrix:{orders:GetUser}:probe".into(),
                bucket_prefix: "hystrix:{orders:GetUser}:b:".into(),
            }
        );
        assert_eq!(channel("orders"), "hystrix:{orders}:transitions");
    }

    #[test]
    fn names_cannot_break_the_tag_or_collide() {
        let keys = CommandKeys::new("a:b", "c}{d %");
        assert_eq!(keys.state, "hystrix:{a%3Ab:c%7D%7Bd%20%25}:state");
        // Without escaping, ("a:b", "c") and ("a", "b:c") would share every key.
        assert_ne!(
            CommandKeys::new("a:b", "c").state,
            CommandKeys::new("a", "b:c").state
        );
        assert_eq!(channel("x}y"), "hystrix:{x%7Dy}:transitions");
        // Non-ASCII is encoded as its UTF-8 bytes.
        assert_eq!(
            CommandKeys::new("é", "ü").open,
            "hystrix:{%C3%A9:%C3%BC}:open"
        );
    }

    #[test]
    fn transitions_parse_from_what_the_scripts_publish() {
        assert_eq!(
            Transition::parse("open 7 Get User"),
            Some(Transition {
                opened: true,
                generation: 7,
                command: "Get User".into()
            })
        );
        assert_eq!(
            Transition::parse("closed 8 GetUser"),
            Some(Transition {
                opened: false,
                generation: 8,
                command: "GetUser".into()
            })
        );
        for bad in [
            "",
            "open",
            "open 7",
            "open 7 ",
            "opened 7 X",
            "open -1 X",
            "open x X",
        ] {
            assert_eq!(Transition::parse(bad), None, "{bad:?}");
        }
    }
}
