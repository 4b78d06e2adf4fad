//! The registry's property store: dynamic layers, resolution and live snapshots per key.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use crate::config::collapser::{CollapserLayer, HotCollapserProperties};
use crate::config::command::{CommandLayer, HotCommandProperties};
use crate::config::thread_pool::{HotThreadPoolProperties, ThreadPoolLayer};
use crate::config::{
    COLLAPSER_PROPERTIES, COMMAND_PROPERTIES, CollapserProperties, CommandProperties, LayerError,
    PropertyInfo, PropertyValue, STREAM_PROPERTIES, StreamLayer, StreamProperties,
    THREAD_POOL_PROPERTIES, ThreadPoolProperties,
};
use crate::error::ConfigError;
use crate::key::{CollapserKey, CommandKey, ThreadPoolKey};

/// One kind of property (command or thread pool): its types, name prefix and rules.
pub(crate) trait PropertyKind: 'static {
    type Props: Clone + PartialEq + Default + Send + Sync + fmt::Debug + 'static;
    type Layer: Clone + Default + PartialEq + Send + Sync + fmt::Debug + 'static;
    /// What the hot path reads without a snapshot guard (atomics), kept equal to the snapshot.
    type Hot: Default + Send + Sync + fmt::Debug + 'static;
    /// `hystrix.command.` or `hystrix.threadpool.`.
    const PREFIX: &'static str;
    const INFO: &'static [PropertyInfo];
    fn set(
        layer: &mut Self::Layer,
        name: &str,
        value: &PropertyValue,
        instance: bool,
    ) -> Result<(), LayerError>;
    fn unset(layer: &mut Self::Layer, name: &str) -> Result<bool, LayerError>;
    fn resolve(global: &Self::Layer, builder: &Self::Layer, instance: &Self::Layer) -> Self::Props;
    fn validate(props: &Self::Props, prefix: &str) -> Result<(), ConfigError>;
    fn keep_fixed(next: &mut Self::Props, current: &Self::Props) -> Vec<&'static str>;
    fn get(props: &Self::Props, name: &str) -> Option<PropertyValue>;
    fn publish_hot(hot: &Self::Hot, props: &Self::Props);
    fn merge(
        a: &Self::Layer,
        b: &Self::Layer,
    ) -> Result<Self::Layer, (&'static str, String, String)>;
}

macro_rules! property_kind {
    ($Kind:ident, $Props:ty, $Layer:ty, $Hot:ty, $prefix:literal, $info:expr, $publish:expr) => {
        #[derive(Debug)]
        pub(crate) struct $Kind;

        impl PropertyKind for $Kind {
            type Props = $Props;
            type Layer = $Layer;
            type Hot = $Hot;
            const PREFIX: &'static str = $prefix;
            const INFO: &'static [PropertyInfo] = $info;
            fn set(
                layer: &mut $Layer,
                name: &str,
                value: &PropertyValue,
                instance: bool,
            ) -> Result<(), LayerError> {
                layer.set(name, value, instance)
            }
            fn unset(layer: &mut $Layer, name: &str) -> Result<bool, LayerError> {
                layer.unset(name)
            }
            fn resolve(global: &$Layer, builder: &$Layer, instance: &$Layer) -> $Props {
                <$Layer>::resolve(global, builder, instance)
            }
            fn validate(props: &$Props, prefix: &str) -> Result<(), ConfigError> {
                props.validate(prefix)
            }
            fn keep_fixed(next: &mut $Props, current: &$Props) -> Vec<&'static str> {
                next.keep_fixed_from(current)
            }
            fn get(props: &$Props, name: &str) -> Option<PropertyValue> {
                props.get(name)
            }
            fn publish_hot(hot: &$Hot, props: &$Props) {
                let publish: fn(&$Hot, &$Props) = $publish;
                publish(hot, props);
            }
            fn merge(a: &$Layer, b: &$Layer) -> Result<$Layer, (&'static str, String, String)> {
                a.merge(b)
            }
        }
    };
}

property_kind!(
    CommandKind,
    CommandProperties,
    CommandLayer,
    HotCommandProperties,
    "hystrix.command.",
    COMMAND_PROPERTIES,
    HotCommandProperties::publish
);
property_kind!(
    ThreadPoolKind,
    ThreadPoolProperties,
    ThreadPoolLayer,
    HotThreadPoolProperties,
    "hystrix.threadpool.",
    THREAD_POOL_PROPERTIES,
    HotThreadPoolProperties::publish
);
property_kind!(
    CollapserKind,
    CollapserProperties,
    CollapserLayer,
    HotCollapserProperties,
    "hystrix.collapser.",
    COLLAPSER_PROPERTIES,
    HotCollapserProperties::publish
);

/// The live properties of one key in use: the resolved snapshot, and its hot-path mirror, both
/// read without a lock.
pub(crate) struct PropertyCell<K: PropertyKind> {
    live: ArcSwap<K::Props>,
    hot: K::Hot,
}

impl<K: PropertyKind> PropertyCell<K> {
    fn new(props: K::Props) -> Self {
        let hot = K::Hot::default();
        K::publish_hot(&hot, &props);
        PropertyCell {
            live: ArcSwap::from_pointee(props),
            hot,
        }
    }

    /// The current snapshot (lock-free).
    #[inline]
    pub(crate) fn load(&self) -> arc_swap::Guard<Arc<K::Props>> {
        self.live.load()
    }

    /// The hot-path mirror of the current snapshot.
    #[inline]
    pub(crate) fn hot(&self) -> &K::Hot {
        &self.hot
    }

    fn store(&self, props: K::Props) {
        K::publish_hot(&self.hot, &props);
        self.live.store(Arc::new(props));
    }
}

impl<K: PropertyKind> fmt::Debug for PropertyCell<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PropertyCell")
            .field("live", &**self.live.load())
            .finish()
    }
}

struct Layers<K: PropertyKind> {
    global: K::Layer,
    instance: HashMap<String, K::Layer>,
    /// Per key in use: the union of its definitions' builder values, and its live cell.
    cells: HashMap<String, (K::Layer, Arc<PropertyCell<K>>)>,
}

/// Live cells and the snapshots to publish in them.
type Updates<K> = Vec<(Arc<PropertyCell<K>>, <K as PropertyKind>::Props)>;

impl<K: PropertyKind> Clone for Layers<K> {
    fn clone(&self) -> Self {
        Layers {
            global: self.global.clone(),
            instance: self.instance.clone(),
            cells: self.cells.clone(),
        }
    }
}

impl<K: PropertyKind> Default for Layers<K> {
    fn default() -> Self {
        Layers {
            global: K::Layer::default(),
            instance: HashMap::new(),
            cells: HashMap::new(),
        }
    }
}

fn prefix_for<K: PropertyKind>(key: &str) -> String {
    format!("{}{key}.", K::PREFIX)
}

impl<K: PropertyKind> Layers<K> {
    fn instance_layer(&self, key: &str) -> K::Layer {
        self.instance.get(key).cloned().unwrap_or_default()
    }

    fn resolved(&self, key: Option<&str>) -> K::Props {
        match key {
            Some(key) => match self.cells.get(key) {
                Some((_, cell)) => (**cell.load()).clone(),
                None => K::resolve(
                    &self.global,
                    &K::Layer::default(),
                    &self.instance_layer(key),
                ),
            },
            None => K::resolve(&self.global, &K::Layer::default(), &K::Layer::default()),
        }
    }

    /// The layer a change of `key` edits (`None`: the global default).
    fn layer_mut(&mut self, key: Option<&str>) -> &mut K::Layer {
        match key {
            Some(key) => self.instance.entry(key.to_owned()).or_default(),
            None => &mut self.global,
        }
    }

    /// Checks these layers after `changes` (each a layer, `None` for the global default, and a
    /// property) were written into them: every key they affect must stay valid, and a fixed
    /// property of a key in use cannot change per key. Returns the snapshots to publish.
    fn check(&self, changes: &[(Option<&str>, &'static str)]) -> Result<Updates<K>, ConfigError> {
        let empty = K::Layer::default();
        K::validate(
            &K::resolve(&self.global, &empty, &empty),
            &format!("{}default.", K::PREFIX),
        )?;
        for key in changes.iter().filter_map(|(key, _)| *key) {
            if !self.cells.contains_key(key) {
                let props = K::resolve(&self.global, &empty, &self.instance_layer(key));
                K::validate(&props, &prefix_for::<K>(key))?;
            }
        }
        let mut updates = Vec::new();
        for (name, (builder, cell)) in &self.cells {
            let mut next = K::resolve(&self.global, builder, &self.instance_layer(name));
            let live = cell.load_full();
            for fixed in K::keep_fixed(&mut next, &live) {
                let changed = |layer: Option<&str>| {
                    changes
                        .iter()
                        .any(|(key, property)| *key == layer && *property == fixed)
                };
                if changed(Some(name)) {
                    return Err(ConfigError::FixedAfterFirstUse {
                        name: format!("{}{name}.{fixed}", K::PREFIX),
                    });
                }
                if changed(None) {
                    tracing::warn!(
                        "hystrix: {}default.{fixed} is fixed once a key is in use; `{name}` keeps \
                         its value, keys created later use the new one",
                        K::PREFIX
                    );
                }
            }
            K::validate(&next, &prefix_for::<K>(name))?;
            if *live != next {
                updates.push((Arc::clone(cell), next));
            }
        }
        Ok(updates)
    }

    /// Adds a definition's builder values for `key` (the union of all definitions' values
    /// applies; two different values for one property conflict) and returns its live cell.
    fn register(
        &mut self,
        key: &str,
        builder: K::Layer,
    ) -> Result<Arc<PropertyCell<K>>, ConfigError> {
        let Some((existing, cell)) = self.cells.get(key) else {
            let props = K::resolve(&self.global, &builder, &self.instance_layer(key));
            K::validate(&props, &prefix_for::<K>(key))?;
            let cell = Arc::new(PropertyCell::new(props));
            self.cells
                .insert(key.to_owned(), (builder, Arc::clone(&cell)));
            return Ok(cell);
        };
        let merged = K::merge(existing, &builder).map_err(|(name, existing, requested)| {
            ConfigError::ConflictingDefinition {
                key: key.to_owned(),
                what: format!("value for `{}{key}.{name}`", K::PREFIX),
                existing,
                requested,
            }
        })?;
        let cell = Arc::clone(cell);
        if merged != *existing {
            let mut next = K::resolve(&self.global, &merged, &self.instance_layer(key));
            if let Some(name) = K::keep_fixed(&mut next, &cell.load_full()).first() {
                return Err(ConfigError::FixedAfterFirstUse {
                    name: format!("{}{key}.{name}", K::PREFIX),
                });
            }
            K::validate(&next, &prefix_for::<K>(key))?;
            cell.store(next);
            self.cells
                .insert(key.to_owned(), (merged, Arc::clone(&cell)));
        }
        Ok(cell)
    }
}

impl<K: PropertyKind> PropertyCell<K> {
    pub(crate) fn load_full(&self) -> Arc<K::Props> {
        self.live.load_full()
    }
}

#[derive(Default)]
struct StoreState {
    command: Layers<CommandKind>,
    thread_pool: Layers<ThreadPoolKind>,
    collapser: Layers<CollapserKind>,
    /// The global stream properties (no keys, no live cells: read once by their users).
    stream: StreamLayer,
}

/// A registry's properties: the dynamic global and per-key layers, and the live snapshot of
/// every key in use. Obtain it with [`Registry::properties`](crate::Registry::properties).
///
/// Names are Hystrix's full names: `hystrix.command.default.<name>`,
/// `hystrix.command.<CommandKey>.<name>`, `hystrix.threadpool.default.<name>`,
/// `hystrix.threadpool.<ThreadPoolKey>.<name>`, `hystrix.collapser.default.<name>`,
/// `hystrix.collapser.<CollapserKey>.<name>` (see the module docs for the layers), and the
/// global stream properties `hystrix.stream.*` / `hystrix.config.stream.*` (SPEC §1.5, see
/// [`StreamProperties`]).
pub struct Properties {
    state: Mutex<StoreState>,
}

impl fmt::Debug for Properties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("Properties")
            .field("command_keys", &state.command.cells.len())
            .field("thread_pool_keys", &state.thread_pool.cells.len())
            .field("collapser_keys", &state.collapser.cells.len())
            .finish()
    }
}

/// A parsed full property name.
struct Target<'a> {
    kind: TargetKind,
    /// `None` for the global default (`...default.<name>`).
    key: Option<&'a str>,
    property: &'static str,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TargetKind {
    Command,
    ThreadPool,
    Collapser,
    Stream,
}

/// The prefix of the stream properties' names (`hystrix.stream.*`, `hystrix.config.stream.*`).
const STREAM_PREFIX: &str = "hystrix.";

fn parse_name(full_name: &str) -> Result<Target<'_>, ConfigError> {
    let unknown = || ConfigError::UnknownProperty {
        name: full_name.to_owned(),
    };
    if let Some(property) = full_name
        .strip_prefix(STREAM_PREFIX)
        .and_then(|rest| STREAM_PROPERTIES.iter().find(|p| p.name == rest))
    {
        return Ok(Target {
            kind: TargetKind::Stream,
            key: None,
            property: property.name,
        });
    }
    let (kind, rest, info) = if let Some(rest) = full_name.strip_prefix(CommandKind::PREFIX) {
        (TargetKind::Command, rest, CommandKind::INFO)
    } else if let Some(rest) = full_name.strip_prefix(ThreadPoolKind::PREFIX) {
        (TargetKind::ThreadPool, rest, ThreadPoolKind::INFO)
    } else if let Some(rest) = full_name.strip_prefix(CollapserKind::PREFIX) {
        (TargetKind::Collapser, rest, CollapserKind::INFO)
    } else {
        return Err(unknown());
    };
    // Keys may contain dots, so match the longest known property name at the end.
    let property = info
        .iter()
        .filter(|p| {
            rest.len() > p.name.len() + 1
                && rest.ends_with(p.name)
                && rest.as_bytes()[rest.len() - p.name.len() - 1] == b'.'
        })
        .max_by_key(|p| p.name.len())
        .ok_or_else(unknown)?;
    let key = &rest[..rest.len() - property.name.len() - 1];
    if key == "default" {
        return Ok(Target {
            kind,
            key: None,
            property: property.name,
        });
    }
    // A value for a key no command can have would never apply: refuse it now.
    match kind {
        TargetKind::Command => CommandKey::new(key).map(drop)?,
        TargetKind::ThreadPool => ThreadPoolKey::new(key).map(drop)?,
        TargetKind::Collapser => CollapserKey::new(key).map(drop)?,
        TargetKind::Stream => {}
    }
    Ok(Target {
        kind,
        key: Some(key),
        property: property.name,
    })
}

/// The error for a value a layer refused, named by its full property name.
pub(crate) fn layer_error(err: LayerError, full_name: &str, value: &PropertyValue) -> ConfigError {
    match err {
        LayerError::Unknown => ConfigError::UnknownProperty {
            name: full_name.to_owned(),
        },
        LayerError::InstanceOnly => ConfigError::InvalidValue {
            name: full_name.to_owned(),
            value: value.to_string(),
            reason: "this property exists only per key, not under `default`".into(),
        },
        LayerError::Invalid(reason) => ConfigError::InvalidValue {
            name: full_name.to_owned(),
            value: value.to_string(),
            reason,
        },
    }
}

impl Properties {
    pub(crate) fn new() -> Self {
        Properties {
            state: Mutex::new(StoreState::default()),
        }
    }

    /// Sets a dynamic property by its full Hystrix name; it applies to the next execution.
    ///
    /// # Errors
    /// - [`ConfigError::UnknownProperty`] if the name is not a command, thread-pool,
    ///   collapser or stream property;
    /// - [`ConfigError::InvalidValue`] if the value does not parse, is out of range, or breaks a
    ///   rule tying properties together for any key it affects (the error names this property
    ///   and the one it conflicts with; change both at once with
    ///   [`set_all`](Properties::set_all));
    /// - [`ConfigError::FixedAfterFirstUse`] for a per-key change of a fixed property of a key in
    ///   use.
    ///
    /// On error nothing changes.
    pub fn set(&self, full_name: &str, value: impl Into<PropertyValue>) -> Result<(), ConfigError> {
        let value = value.into();
        let shown = value.to_string();
        self.set_all([(full_name, value)])
            .map_err(|err| name_the_change(err, full_name, &shown))
    }

    /// Sets several properties at once: all of them apply, or (on any error) none. The rules
    /// tying properties together are checked on the result, so values that are only valid
    /// together can be set together, in any order:
    ///
    /// ```
    /// let registry = hystrix::Registry::new();
    /// registry.properties().set_all([
    ///     ("hystrix.command.GetUser.circuitBreaker.halfOpen.successThreshold", 3),
    ///     ("hystrix.command.GetUser.circuitBreaker.halfOpen.permittedRequests", 5),
    /// ])?;
    /// # Ok::<(), hystrix::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// As [`set`](Properties::set), for the first value or rule that fails.
    pub fn set_all<'a, V: Into<PropertyValue>>(
        &self,
        values: impl IntoIterator<Item = (&'a str, V)>,
    ) -> Result<(), ConfigError> {
        let targets = values
            .into_iter()
            .map(|(full_name, value)| Ok((parse_name(full_name)?, full_name, value.into())))
            .collect::<Result<Vec<_>, ConfigError>>()?;
        let mut state = self.state.lock();
        let StoreState {
            command,
            thread_pool,
            collapser,
            stream,
        } = &mut *state;
        // Each kind is checked on its own: no rule ties a command property to a pool's.
        let of_kind = |kind: TargetKind| {
            targets
                .iter()
                .filter(move |(target, _, _)| target.kind == kind)
        };
        let mut next_command = command.clone();
        let mut next_pool = thread_pool.clone();
        let mut next_collapser = collapser.clone();
        let command_updates = set_checked(&mut next_command, of_kind(TargetKind::Command))?;
        let pool_updates = set_checked(&mut next_pool, of_kind(TargetKind::ThreadPool))?;
        let collapser_updates = set_checked(&mut next_collapser, of_kind(TargetKind::Collapser))?;
        let mut next_stream = stream.clone();
        for (target, full_name, value) in of_kind(TargetKind::Stream) {
            next_stream
                .set(target.property, value, false)
                .map_err(|e| layer_error(e, full_name, value))?;
        }
        *stream = next_stream;
        *command = next_command;
        *thread_pool = next_pool;
        *collapser = next_collapser;
        publish(command_updates);
        publish(pool_updates);
        publish(collapser_updates);
        Ok(())
    }

    /// Removes a dynamic property set with [`set`](Properties::set); lower layers apply again
    /// from the next execution. Returns whether a value was removed.
    ///
    /// # Errors
    /// As [`set`](Properties::set): an unknown name, or a removal that would leave some key's
    /// properties invalid or change a fixed property of a key in use.
    pub fn unset(&self, full_name: &str) -> Result<bool, ConfigError> {
        let target = parse_name(full_name)?;
        let mut state = self.state.lock();
        match target.kind {
            TargetKind::Command => unset_in(&mut state.command, &target, full_name),
            TargetKind::ThreadPool => unset_in(&mut state.thread_pool, &target, full_name),
            TargetKind::Collapser => unset_in(&mut state.collapser, &target, full_name),
            TargetKind::Stream => state
                .stream
                .unset(target.property)
                .map_err(|e| layer_error(e, full_name, &PropertyValue::Str(String::new()))),
        }
        .map_err(|err| name_the_change(err, full_name, "(unset)"))
    }

    /// The effective value of a property by its full name: for a key in use its live value,
    /// otherwise what a new key would get. `Ok(None)` for an unset optional property.
    ///
    /// # Errors
    /// [`ConfigError::UnknownProperty`] for a name that is not a property.
    pub fn get(&self, full_name: &str) -> Result<Option<PropertyValue>, ConfigError> {
        let target = parse_name(full_name)?;
        let state = self.state.lock();
        Ok(match target.kind {
            TargetKind::Command => {
                CommandKind::get(&state.command.resolved(target.key), target.property)
            }
            TargetKind::ThreadPool => {
                ThreadPoolKind::get(&state.thread_pool.resolved(target.key), target.property)
            }
            TargetKind::Collapser => {
                CollapserKind::get(&state.collapser.resolved(target.key), target.property)
            }
            TargetKind::Stream => resolved_stream(&state.stream).get(target.property),
        })
    }

    /// A snapshot of a command key's properties (what a new key would get if it is not in use).
    pub fn command(&self, key: &CommandKey) -> CommandProperties {
        self.state.lock().command.resolved(Some(key.as_str()))
    }

    /// A snapshot of a thread-pool key's properties (what a new pool would get if none exists).
    pub fn thread_pool(&self, key: &ThreadPoolKey) -> ThreadPoolProperties {
        self.state.lock().thread_pool.resolved(Some(key.as_str()))
    }

    /// A snapshot of a collapser key's properties (what a new collapser would get if none
    /// exists).
    pub fn collapser(&self, key: &CollapserKey) -> CollapserProperties {
        self.state.lock().collapser.resolved(Some(key.as_str()))
    }

    /// The stream properties (SPEC §1.5): the values set, else Hystrix's defaults.
    pub fn stream(&self) -> StreamProperties {
        resolved_stream(&self.state.lock().stream)
    }

    /// Registers a collapser key's builder values (the union of its definitions' values;
    /// different values conflict) and returns its live cell.
    pub(crate) fn register_collapser(
        &self,
        key: &CollapserKey,
        builder: CollapserLayer,
    ) -> Result<Arc<PropertyCell<CollapserKind>>, ConfigError> {
        self.state.lock().collapser.register(key.as_str(), builder)
    }

    /// Registers a command key's builder values (first definition wins; a different one is a
    /// conflict) and returns its live cell.
    pub(crate) fn register_command(
        &self,
        key: &CommandKey,
        builder: CommandLayer,
    ) -> Result<Arc<PropertyCell<CommandKind>>, ConfigError> {
        self.state.lock().command.register(key.as_str(), builder)
    }

    /// Registers a thread-pool key's builder values (the union of those given by the commands
    /// that use it; different values conflict) and returns its live cell.
    pub(crate) fn register_thread_pool(
        &self,
        key: &ThreadPoolKey,
        builder: ThreadPoolLayer,
    ) -> Result<Arc<PropertyCell<ThreadPoolKind>>, ConfigError> {
        self.state
            .lock()
            .thread_pool
            .register(key.as_str(), builder)
    }

    /// Forgets a command key's live cell (its dynamic per-key values stay).
    pub(crate) fn remove_command(&self, key: &CommandKey) {
        self.state.lock().command.cells.remove(key.as_str());
    }

    /// Forgets a thread-pool key's live cell (its dynamic per-key values stay).
    pub(crate) fn remove_thread_pool(&self, key: &ThreadPoolKey) {
        self.state.lock().thread_pool.cells.remove(key.as_str());
    }
}

fn resolved_stream(layer: &StreamLayer) -> StreamProperties {
    let none = StreamLayer::default();
    StreamLayer::resolve(layer, &none, &none)
}

/// Writes `targets` into `layers` and checks the result; returns the snapshots to publish.
fn set_checked<'t, K: PropertyKind>(
    layers: &mut Layers<K>,
    targets: impl Iterator<Item = &'t (Target<'t>, &'t str, PropertyValue)>,
) -> Result<Updates<K>, ConfigError> {
    let mut changes = Vec::new();
    for (target, full_name, value) in targets {
        K::set(
            layers.layer_mut(target.key),
            target.property,
            value,
            target.key.is_some(),
        )
        .map_err(|e| layer_error(e, full_name, value))?;
        changes.push((target.key, target.property));
    }
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    layers.check(&changes)
}

fn unset_in<K: PropertyKind>(
    layers: &mut Layers<K>,
    target: &Target<'_>,
    full_name: &str,
) -> Result<bool, ConfigError> {
    let mut next = layers.clone();
    let removed = K::unset(next.layer_mut(target.key), target.property)
        .map_err(|e| layer_error(e, full_name, &PropertyValue::Str(String::new())))?;
    if removed {
        let updates = next.check(&[(target.key, target.property)])?;
        *layers = next;
        publish(updates);
    }
    Ok(removed)
}

/// Stores new snapshots in their live cells.
fn publish<K: PropertyKind>(updates: Updates<K>) {
    for (cell, props) in updates {
        cell.store(props);
    }
}

/// A change of `full_name` (to `value`) broke a rule through another property: the error names
/// the property changed, and the one it conflicts with.
fn name_the_change(err: ConfigError, full_name: &str, value: &str) -> ConfigError {
    match err {
        ConfigError::InvalidValue {
            name,
            value: other_value,
            reason,
        } if name != full_name => ConfigError::InvalidValue {
            name: full_name.to_owned(),
            value: value.to_owned(),
            reason: format!(
                "conflicts with `{name}` = {other_value}, which {reason} (change both at once \
                 with Properties::set_all)"
            ),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_properties_are_global_and_validated() {
        let p = Properties::new();
        assert_eq!(p.stream(), StreamProperties::default());
        assert_eq!(p.stream().dashboard_interval_in_milliseconds, 500);
        p.set("hystrix.stream.dashboard.intervalInMilliseconds", "250")
            .unwrap();
        p.set("hystrix.config.stream.maxConcurrentConnections", 2)
            .unwrap();
        let stream = p.stream();
        assert_eq!(stream.dashboard_interval_in_milliseconds, 250);
        assert_eq!(stream.max_concurrent_connections, 2);
        assert_eq!(stream.config_interval_in_milliseconds, 5000);
        assert_eq!(
            p.get("hystrix.config.stream.maxConcurrentConnections")
                .unwrap(),
            Some(PropertyValue::Int(2))
        );
        let err = p
            .set("hystrix.stream.config.intervalInMilliseconds", 0)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid value `0` for `hystrix.stream.config.intervalInMilliseconds`: must be at \
             least 1 ms"
        );
        assert!(matches!(
            p.set("hystrix.stream.dashboard.interval", 1),
            Err(ConfigError::UnknownProperty { .. })
        ));
        assert!(
            p.unset("hystrix.stream.dashboard.intervalInMilliseconds")
                .unwrap()
        );
        assert_eq!(p.stream().dashboard_interval_in_milliseconds, 500);
    }

    fn key(name: &str) -> CommandKey {
        CommandKey::new(name).unwrap()
    }

    fn timeout_of(p: &Properties, k: &str) -> u64 {
        p.command(&key(k)).execution_timeout_in_milliseconds
    }

    #[test]
    fn layers_resolve_in_hystrix_order() {
        let p = Properties::new();
        let name = "execution.isolation.thread.timeoutInMilliseconds";
        assert_eq!(timeout_of(&p, "A"), 1000);
        p.set(&format!("hystrix.command.default.{name}"), 700)
            .unwrap();
        assert_eq!(timeout_of(&p, "A"), 700);

        // A builder value hides the dynamic global default (SPEC §1.1) ...
        let builder = CommandLayer {
            execution_timeout_in_milliseconds: Some(300),
            ..CommandLayer::default()
        };
        let cell = p.register_command(&key("A"), builder).unwrap();
        assert_eq!(cell.load().execution_timeout_in_milliseconds, 300);
        p.set(&format!("hystrix.command.default.{name}"), 900)
            .unwrap();
        assert_eq!(cell.load().execution_timeout_in_milliseconds, 300);

        // ... and only the dynamic per-key value overrides it, live.
        p.set(&format!("hystrix.command.A.{name}"), "150").unwrap();
        assert_eq!(cell.load().execution_timeout_in_milliseconds, 150);
        assert!(p.unset(&format!("hystrix.command.A.{name}")).unwrap());
        assert_eq!(cell.load().execution_timeout_in_milliseconds, 300);
        assert_eq!(
            p.get(&format!("hystrix.command.B.{name}")).unwrap(),
            Some(PropertyValue::Int(900))
        );
    }

    #[test]
    fn invalid_values_are_refused_by_full_name_and_change_nothing() {
        let p = Properties::new();
        let cases: [(&str, PropertyValue, &str); 6] = [
            (
                "hystrix.command.A.execution.isolation.thread.timeoutInMilliseconds",
                (-5).into(),
                "invalid value `-5` for `hystrix.command.A.execution.isolation.thread.timeoutInMilliseconds`: must not be negative",
            ),
            (
                "hystrix.command.A.execution.isolation.thread.timeoutInMilliseconds",
                0.into(),
                "invalid value `0` for `hystrix.command.A.execution.isolation.thread.timeoutInMilliseconds`: must be at least 1 ms (to turn the timeout off, set execution.timeout.enabled=false)",
            ),
            (
                "hystrix.command.default.circuitBreaker.forceOpen",
                "yes".into(),
                "invalid value `yes` for `hystrix.command.default.circuitBreaker.forceOpen`: expected true or false",
            ),
            (
                "hystrix.command.default.metrics.rollingStats.numBuckets",
                7.into(),
                "invalid value `7` for `hystrix.command.default.metrics.rollingStats.numBuckets`: must divide metrics.rollingStats.timeInMilliseconds (10000 ms) evenly",
            ),
            (
                "hystrix.command.A.circuitBreaker.halfOpen.successThreshold",
                2.into(),
                "invalid value `2` for `hystrix.command.A.circuitBreaker.halfOpen.successThreshold`: must not exceed circuitBreaker.halfOpen.permittedRequests (1)",
            ),
            (
                "hystrix.command.default.threadPoolKeyOverride",
                "Other".into(),
                "invalid value `Other` for `hystrix.command.default.threadPoolKeyOverride`: this property exists only per key, not under `default`",
            ),
        ];
        for (name, value, message) in cases {
            let err = p.set(name, value).unwrap_err();
            assert_eq!(err.to_string(), message);
        }
        assert_eq!(p.command(&key("A")), CommandProperties::default());
    }

    #[test]
    fn unknown_names_are_refused() {
        let p = Properties::new();
        for name in [
            "hystrix.command.A.execution.timeoutInMillis",
            "hystrix.command.execution.isolation.thread.timeoutInMilliseconds",
            "hystrix.other.A.coreSize",
            "coreSize",
        ] {
            assert_eq!(
                p.set(name, 1).unwrap_err(),
                ConfigError::UnknownProperty {
                    name: name.to_owned()
                }
            );
        }
    }

    #[test]
    fn keys_with_dots_resolve() {
        let p = Properties::new();
        p.set("hystrix.command.svc.users.GetUser.fallback.enabled", false)
            .unwrap();
        assert!(!p.command(&key("svc.users.GetUser")).fallback_enabled);
    }

    #[test]
    fn fixed_properties_cannot_change_for_a_key_in_use() {
        let p = Properties::new();
        let cell = p
            .register_command(&key("A"), CommandLayer::default())
            .unwrap();
        let err = p
            .set(
                "hystrix.command.A.metrics.rollingStats.timeInMilliseconds",
                20_000,
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "property `hystrix.command.A.metrics.rollingStats.timeInMilliseconds` is fixed once \
             its key is in use (a command was defined with it), so it was not changed; set it \
             before the key's first definition, or after `Registry::remove` of the key"
        );
        // A global change applies to keys created later only.
        p.set(
            "hystrix.command.default.metrics.rollingStats.timeInMilliseconds",
            20_000,
        )
        .unwrap();
        assert_eq!(
            cell.load().metrics_rolling_stats_time_in_milliseconds,
            10_000
        );
        let later = p
            .register_command(&key("B"), CommandLayer::default())
            .unwrap();
        assert_eq!(
            later.load().metrics_rolling_stats_time_in_milliseconds,
            20_000
        );
    }

    #[test]
    fn definitions_merge_and_conflict_only_on_different_values() {
        let p = Properties::new();
        let first = CommandLayer {
            fallback_enabled: Some(false),
            ..CommandLayer::default()
        };
        let cell = p.register_command(&key("A"), first.clone()).unwrap();
        assert!(
            p.register_command(&key("A"), CommandLayer::default())
                .is_ok()
        );
        let second = CommandLayer {
            circuit_breaker_request_volume_threshold: Some(5),
            ..CommandLayer::default()
        };
        p.register_command(&key("A"), second).unwrap();
        assert_eq!(cell.load().circuit_breaker_request_volume_threshold, 5);
        assert!(!cell.load().fallback_enabled);
        let err = p
            .register_command(
                &key("A"),
                CommandLayer {
                    fallback_enabled: Some(true),
                    ..CommandLayer::default()
                },
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "command `A` is already defined with a different value for \
             `hystrix.command.A.fallback.enabled`: first `false`, now `true`"
        );
    }

    #[test]
    fn thread_pool_properties_validate() {
        let p = Properties::new();
        let err = p.set("hystrix.threadpool.Users.coreSize", 0).unwrap_err();
        assert!(err.to_string().contains("needs at least 1 thread"), "{err}");
        p.set("hystrix.threadpool.Users.maxQueueSize", -1).unwrap();
        let err = p
            .set("hystrix.threadpool.default.queueSizeRejectionThreshold", -1)
            .unwrap_err();
        assert!(err.to_string().ends_with("must not be negative"), "{err}");
        p.set("hystrix.threadpool.Users.coreSize", "4").unwrap();
        assert_eq!(
            p.thread_pool(&ThreadPoolKey::new("Users").unwrap())
                .core_size,
            4
        );
    }
}
