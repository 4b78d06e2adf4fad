//! The registry's property store: the dynamic layers, each kept per source (files, the
//! environment, run time), their resolution with provenance, and the live snapshot of every key
//! in use.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
#[cfg(feature = "reload")]
use std::sync::Weak;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use crate::config::collapser::{CollapserLayer, HotCollapserProperties};
use crate::config::command::{CommandLayer, HotCommandProperties};
use crate::config::thread_pool::{HotThreadPoolProperties, ThreadPoolLayer};
use crate::config::{
    COLLAPSER_PROPERTIES, COMMAND_PROPERTIES, CollapserProperties, CommandProperties, LayerError,
    LayerValue, Origin, PropertyInfo, PropertyLayer, PropertyReport, PropertyValue,
    STREAM_PROPERTIES, StreamLayer, StreamProperties, THREAD_POOL_PROPERTIES, ThreadPoolProperties,
};
use crate::error::ConfigError;
use crate::key::{CollapserKey, CommandKey, ThreadPoolKey};

/// One kind of property (command, thread pool, collapser, stream): its types, name prefix and
/// rules.
pub(crate) trait PropertyKind: 'static + Sized {
    type Props: Clone + PartialEq + Default + Send + Sync + fmt::Debug + 'static;
    type Layer: Clone + Default + PartialEq + Send + Sync + fmt::Debug + 'static;
    /// What the hot path reads without a snapshot guard (atomics), kept equal to the snapshot.
    type Hot: Default + Send + Sync + fmt::Debug + 'static;
    /// `hystrix.command.`, `hystrix.threadpool.`, `hystrix.collapser.` or `hystrix.`.
    const PREFIX: &'static str;
    /// Whether names carry a key (`<PREFIX><Key|default>.<name>`); the stream properties do not.
    const KEYED: bool;
    const INFO: &'static [PropertyInfo];
    fn set(
        layer: &mut Self::Layer,
        name: &str,
        value: &PropertyValue,
        instance: bool,
    ) -> Result<(), LayerError>;
    fn unset(layer: &mut Self::Layer, name: &str) -> Result<bool, LayerError>;
    fn get_layer(layer: &Self::Layer, name: &str) -> Option<PropertyValue>;
    fn over(upper: &Self::Layer, lower: &Self::Layer) -> Self::Layer;
    fn resolve(global: &Self::Layer, builder: &Self::Layer, instance: &Self::Layer) -> Self::Props;
    fn validate(props: &Self::Props, prefix: &str, rules: &Rules) -> Result<(), ConfigError>;
    fn keep_fixed(next: &mut Self::Props, current: &Self::Props) -> Vec<&'static str>;
    fn get(props: &Self::Props, name: &str) -> Option<PropertyValue>;
    fn publish_hot(hot: &Self::Hot, props: &Self::Props);
    fn merge(
        a: &Self::Layer,
        b: &Self::Layer,
    ) -> Result<Self::Layer, (&'static str, String, String)>;
    /// This kind's layers in the store.
    fn of(state: &StoreState) -> &Layers<Self>;
    fn of_mut(state: &mut StoreState) -> &mut Layers<Self>;

    /// The full name of `property` for `key` (`None`: the global default).
    fn full_name(key: Option<&str>, property: &str) -> String {
        if Self::KEYED {
            format!("{}{}.{property}", Self::PREFIX, key.unwrap_or("default"))
        } else {
            format!("{}{property}", Self::PREFIX)
        }
    }
}

macro_rules! property_kind {
    (
        $Kind:ident, $Props:ty, $Layer:ty, $Hot:ty, $prefix:literal, $keyed:literal, $info:expr,
        $publish:expr, $field:ident
    ) => {
        #[derive(Debug)]
        pub(crate) struct $Kind;

        impl PropertyKind for $Kind {
            type Props = $Props;
            type Layer = $Layer;
            type Hot = $Hot;
            const PREFIX: &'static str = $prefix;
            const KEYED: bool = $keyed;
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
            fn get_layer(layer: &$Layer, name: &str) -> Option<PropertyValue> {
                layer.get(name)
            }
            fn over(upper: &$Layer, lower: &$Layer) -> $Layer {
                upper.over(lower)
            }
            fn resolve(global: &$Layer, builder: &$Layer, instance: &$Layer) -> $Props {
                <$Layer>::resolve(global, builder, instance)
            }
            fn validate(props: &$Props, prefix: &str, rules: &Rules) -> Result<(), ConfigError> {
                props.validate(prefix, rules)
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
            fn of(state: &StoreState) -> &Layers<Self> {
                &state.$field
            }
            fn of_mut(state: &mut StoreState) -> &mut Layers<Self> {
                &mut state.$field
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
    true,
    COMMAND_PROPERTIES,
    HotCommandProperties::publish,
    command
);
property_kind!(
    ThreadPoolKind,
    ThreadPoolProperties,
    ThreadPoolLayer,
    HotThreadPoolProperties,
    "hystrix.threadpool.",
    true,
    THREAD_POOL_PROPERTIES,
    HotThreadPoolProperties::publish,
    thread_pool
);
property_kind!(
    CollapserKind,
    CollapserProperties,
    CollapserLayer,
    HotCollapserProperties,
    "hystrix.collapser.",
    true,
    COLLAPSER_PROPERTIES,
    HotCollapserProperties::publish,
    collapser
);
// The global stream properties: no keys, so no live cells (their users read them once).
property_kind!(
    StreamKind,
    StreamProperties,
    StreamLayer,
    (),
    "hystrix.",
    false,
    STREAM_PROPERTIES,
    |_, _| {},
    stream
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

    pub(crate) fn load_full(&self) -> Arc<K::Props> {
        self.live.load_full()
    }

    /// Called under the store's write lock (one writer at a time). The snapshot first, then
    /// its hot mirror: a reader that sees the mirror's new generation finds the new snapshot.
    fn store(&self, props: K::Props) {
        let props = Arc::new(props);
        self.live.store(Arc::clone(&props));
        K::publish_hot(&self.hot, &props);
    }
}

impl<K: PropertyKind> fmt::Debug for PropertyCell<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PropertyCell")
            .field("live", &**self.live.load())
            .finish()
    }
}

/// A source of dynamic values. Within each dynamic layer (global default, per key) the sources
/// rank as listed, lowest first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum SourceId {
    /// A configuration file, by path; a file first loaded later ranks above those first loaded
    /// earlier (a reload keeps its rank).
    #[cfg_attr(
        not(feature = "config-files"),
        allow(dead_code, reason = "files are read with the config-files feature")
    )]
    File(PathBuf),
    /// A section of the application's settings, by the name it was loaded under; it ranks as
    /// a file does, by when it was first loaded.
    #[cfg_attr(
        not(feature = "serde"),
        allow(dead_code, reason = "sections are read with the serde feature")
    )]
    Section(String),
    /// The process environment.
    Env,
    /// `Properties::set` / `set_all` / `unset`.
    Runtime,
}

/// A property of one dynamic layer: `None` for the global default, else the key.
type Slot = (Option<String>, &'static str);

/// The properties whose values differ between two versions of one layer, as slots of `key`.
fn changed_slots<K: PropertyKind>(key: Option<&str>, old: &K::Layer, new: &K::Layer) -> Vec<Slot> {
    count_work();
    K::INFO
        .iter()
        .filter(|info| K::get_layer(old, info.name) != K::get_layer(new, info.name))
        .map(|info| (key.map(str::to_owned), info.name))
        .collect()
}

/// Applies write number `index` to `layer` (a value to set, or `None` to remove).
fn write_layer<K: PropertyKind>(
    layer: &mut K::Layer,
    index: usize,
    write: &Write<'_>,
) -> Result<(), StageError> {
    let Target { key, property, .. } = write.target;
    match &write.value {
        Some(value) => K::set(layer, property, value, key.is_some()).map_err(|err| StageError {
            write: Some(index),
            error: layer_error(err, write.name, value),
        }),
        None => {
            // The name parsed, so the layer knows it.
            let _ = K::unset(layer, property);
            Ok(())
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Per-key layers compared and snapshots resolved by changes on this thread: a per-key
    /// change must do work for its own key only, whatever the number of keys (issue 20).
    static WORK: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts one unit of work that a change does per key it looks at (see `WORK`).
#[inline]
fn count_work() {
    #[cfg(test)]
    WORK.with(|work| work.set(work.get() + 1));
}

/// The dynamic values one source gives one kind of property, and where each was written.
struct Dynamic<K: PropertyKind> {
    global: K::Layer,
    instance: HashMap<String, K::Layer>,
    /// Where each value was written; a value without an entry was set at run time.
    origins: HashMap<Slot, Origin>,
}

impl<K: PropertyKind> Default for Dynamic<K> {
    fn default() -> Self {
        Dynamic {
            global: K::Layer::default(),
            instance: HashMap::new(),
            origins: HashMap::new(),
        }
    }
}

impl<K: PropertyKind> Dynamic<K> {
    fn layer(&self, key: Option<&str>) -> Option<&K::Layer> {
        match key {
            None => Some(&self.global),
            Some(key) => self.instance.get(key),
        }
    }

    fn layer_mut(&mut self, key: Option<&str>) -> &mut K::Layer {
        match key {
            None => &mut self.global,
            Some(key) => self.instance.entry(key.to_owned()).or_default(),
        }
    }

    /// Puts `layer` in place of `key`'s (`None`: the global default) and returns the one it
    /// replaces (`None`: the key had none). An empty per-key layer is removed.
    fn put_layer(&mut self, key: Option<&str>, layer: Option<K::Layer>) -> Option<K::Layer> {
        let layer = layer.filter(|layer| key.is_none() || *layer != K::Layer::default());
        match (key, layer) {
            (None, layer) => Some(std::mem::replace(
                &mut self.global,
                layer.unwrap_or_default(),
            )),
            (Some(key), Some(layer)) => self.instance.insert(key.to_owned(), layer),
            (Some(key), None) => self.instance.remove(key),
        }
    }

    /// Applies write number `index`, recording where its value was written.
    fn write(&mut self, index: usize, write: &Write<'_>) -> Result<(), StageError> {
        write_layer::<K>(self.layer_mut(write.target.key), index, write)?;
        let slot = (write.target.key.map(str::to_owned), write.target.property);
        match write.value {
            Some(_) => self.origins.insert(slot, write.origin.clone()),
            None => self.origins.remove(&slot),
        };
        Ok(())
    }

    fn value(&self, key: Option<&str>, property: &str) -> Option<PropertyValue> {
        self.layer(key)
            .and_then(|layer| K::get_layer(layer, property))
    }

    fn origin(&self, key: Option<&str>, property: &'static str) -> Origin {
        self.origins
            .get(&(key.map(str::to_owned), property))
            .cloned()
            .unwrap_or(Origin::Runtime)
    }

    /// The slots whose values differ between `self` and `other`.
    fn diff(&self, other: &Self) -> Vec<Slot> {
        let keys: BTreeSet<Option<&str>> = std::iter::once(None)
            .chain(self.instance.keys().map(|key| Some(key.as_str())))
            .chain(other.instance.keys().map(|key| Some(key.as_str())))
            .collect();
        let mut changes = Vec::new();
        for key in keys {
            count_work();
            for info in K::INFO {
                if self.value(key, info.name) != other.value(key, info.name) {
                    changes.push((key.map(str::to_owned), info.name));
                }
            }
        }
        changes
    }
}

/// A key in use: the union of its definitions' builder values, its live cell, and where each
/// fixed property's value came from when the key was first used.
struct Cell<K: PropertyKind> {
    builder: K::Layer,
    live: Arc<PropertyCell<K>>,
    first_use: HashMap<&'static str, LayerValue>,
}

/// One kind's dynamic values per source, and its keys in use.
pub(crate) struct Layers<K: PropertyKind> {
    /// Lowest precedence first: files in the order they were first loaded, the environment,
    /// run time. Every kind lists the same sources in the same order.
    sources: Vec<(SourceId, Dynamic<K>)>,
    cells: HashMap<String, Cell<K>>,
    /// What the registry allows (the same in every kind).
    rules: Rules,
}

/// Live cells and the snapshots to publish in them.
type Updates<K> = Vec<(Arc<PropertyCell<K>>, <K as PropertyKind>::Props)>;

/// A global change of a fixed property that a key in use does not take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FixedKept {
    /// The global default's full name.
    pub(crate) name: String,
    /// The key that keeps its value.
    pub(crate) key: String,
}

impl<K: PropertyKind> Default for Layers<K> {
    fn default() -> Self {
        Layers {
            sources: vec![
                (SourceId::Env, Dynamic::default()),
                (SourceId::Runtime, Dynamic::default()),
            ],
            cells: HashMap::new(),
            rules: Rules::default(),
        }
    }
}

/// What the registry allows beyond the properties' own rules, checked with them whenever a
/// key's properties are validated.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rules {
    /// [`RegistryBuilder::allow_chaos`](crate::RegistryBuilder::allow_chaos): `chaos.enabled`
    /// may be true.
    pub(crate) chaos_allowed: bool,
    /// [`RegistryBuilder::deny_unknown_properties`](crate::RegistryBuilder::deny_unknown_properties):
    /// a load that names something that is not a property is refused.
    pub(crate) deny_unknown: bool,
}

fn prefix_for<K: PropertyKind>(key: &str) -> String {
    format!("{}{key}.", K::PREFIX)
}

impl<K: PropertyKind> Layers<K> {
    /// The dynamic layer of `key` (`None`: the global default), its sources merged.
    fn merged(&self, key: Option<&str>) -> K::Layer {
        self.sources
            .iter()
            .fold(K::Layer::default(), |lower, (_, source)| {
                match source.layer(key) {
                    Some(layer) => K::over(layer, &lower),
                    None => lower,
                }
            })
    }

    fn global(&self) -> K::Layer {
        self.merged(None)
    }

    fn instance_layer(&self, key: &str) -> K::Layer {
        self.merged(Some(key))
    }

    fn source(&self, id: &SourceId) -> Option<&Dynamic<K>> {
        self.sources
            .iter()
            .find(|(source, _)| source == id)
            .map(|(_, values)| values)
    }

    /// Replaces `id`'s values (a new file or section ranks above the files and sections before
    /// it, below the environment); returns the slots that changed and how to put the old values back. Costs
    /// the size of the source's old and new values.
    fn replace_source(&mut self, id: &SourceId, values: Dynamic<K>) -> (Vec<Slot>, Undo) {
        if let Some(at) = self.sources.iter().position(|(source, _)| source == id) {
            let changes = self.sources[at].1.diff(&values);
            let before = std::mem::replace(&mut self.sources[at].1, values);
            let undo: Undo = Box::new(move |state| K::of_mut(state).sources[at].1 = before);
            return (changes, undo);
        }
        let changes = Dynamic::default().diff(&values);
        let at = self
            .sources
            .iter()
            .position(|(source, _)| !matches!(source, SourceId::File(_) | SourceId::Section(_)))
            .unwrap_or(self.sources.len());
        self.sources.insert(at, (id.clone(), values));
        let undo: Undo = Box::new(move |state| drop(K::of_mut(state).sources.remove(at)));
        (changes, undo)
    }

    /// Applies `writes` (with their indices) on top of `id`'s values; returns the slots that
    /// changed and how to put the old values back. Costs the number of keys written, whatever
    /// the number of keys the source or the store holds. A refused value changes nothing.
    fn patch_source(
        &mut self,
        id: &SourceId,
        writes: &[(usize, &Write<'_>)],
    ) -> Result<(Vec<Slot>, Undo), StageError> {
        let Some(at) = self.sources.iter().position(|(source, _)| source == id) else {
            let mut values = Dynamic::default();
            for &(index, write) in writes {
                values.write(index, write)?;
            }
            return Ok(self.replace_source(id, values));
        };
        let source = &mut self.sources[at].1;
        // The layers written, changed on copies first.
        let mut written: HashMap<Option<&str>, K::Layer> = HashMap::new();
        for &(index, write) in writes {
            let key = write.target.key;
            let layer = written
                .entry(key)
                .or_insert_with(|| source.layer(key).cloned().unwrap_or_default());
            write_layer::<K>(layer, index, write)?;
        }
        let mut changes = Vec::new();
        let mut layers_before = Vec::with_capacity(written.len());
        for (key, layer) in written {
            let before = source.layer(key).cloned().unwrap_or_default();
            changes.extend(changed_slots::<K>(key, &before, &layer));
            let before = source.put_layer(key, Some(layer));
            layers_before.push((key.map(str::to_owned), before));
        }
        let mut origins_before = Vec::with_capacity(writes.len());
        for &(_, write) in writes {
            let slot = (write.target.key.map(str::to_owned), write.target.property);
            let before = match write.value {
                Some(_) => source.origins.insert(slot.clone(), write.origin.clone()),
                None => source.origins.remove(&slot),
            };
            origins_before.push((slot, before));
        }
        let undo: Undo = Box::new(move |state| {
            let source = &mut K::of_mut(state).sources[at].1;
            for (slot, origin) in origins_before.into_iter().rev() {
                match origin {
                    Some(origin) => source.origins.insert(slot, origin),
                    None => source.origins.remove(&slot),
                };
            }
            for (key, layer) in layers_before {
                source.put_layer(key.as_deref(), layer);
            }
        });
        Ok((changes, undo))
    }

    fn resolved(&self, key: Option<&str>) -> K::Props {
        match key {
            Some(key) => match self.cells.get(key) {
                Some(cell) => (**cell.live.load()).clone(),
                None => K::resolve(
                    &self.global(),
                    &K::Layer::default(),
                    &self.instance_layer(key),
                ),
            },
            None => K::resolve(&self.global(), &K::Layer::default(), &K::Layer::default()),
        }
    }

    /// Checks these layers after the slots in `changes` changed: every key they affect must
    /// stay valid, and a fixed property of a key in use cannot change per key. Returns the
    /// snapshots to publish, and the global changes of fixed properties that keys in use do
    /// not take.
    ///
    /// A per-key change affects its own key only, so its cost does not grow with the number of
    /// keys; a change of a global default affects every key in use, and resolves each.
    fn check(&self, changes: &[Slot]) -> Result<(Updates<K>, Vec<FixedKept>), ConfigError> {
        let empty = K::Layer::default();
        let global = self.global();
        K::validate(
            &K::resolve(&global, &empty, &empty),
            &format!("{}default.", K::PREFIX),
            &self.rules,
        )?;
        let keys: BTreeSet<&str> = changes
            .iter()
            .filter_map(|(key, _)| key.as_deref())
            .collect();
        for &key in &keys {
            if !self.cells.contains_key(key) {
                count_work();
                let props = K::resolve(&global, &empty, &self.instance_layer(key));
                K::validate(&props, &prefix_for::<K>(key), &self.rules)?;
            }
        }
        let affected: Box<dyn Iterator<Item = (&String, &Cell<K>)>> =
            if changes.iter().any(|(key, _)| key.is_none()) {
                Box::new(self.cells.iter())
            } else {
                Box::new(keys.iter().filter_map(|&key| self.cells.get_key_value(key)))
            };
        let mut updates = Vec::new();
        let mut kept = Vec::new();
        for (name, cell) in affected {
            count_work();
            let mut next = K::resolve(&global, &cell.builder, &self.instance_layer(name));
            let live = cell.live.load_full();
            for fixed in K::keep_fixed(&mut next, &live) {
                let changed = |layer: Option<&str>| {
                    changes
                        .iter()
                        .any(|(key, property)| key.as_deref() == layer && *property == fixed)
                };
                if changed(Some(name)) {
                    return Err(ConfigError::FixedAfterFirstUse {
                        name: K::full_name(Some(name), fixed),
                    });
                }
                if changed(None) {
                    kept.push(FixedKept {
                        name: K::full_name(None, fixed),
                        key: name.clone(),
                    });
                }
            }
            K::validate(&next, &prefix_for::<K>(name), &self.rules)?;
            if *live != next {
                updates.push((Arc::clone(&cell.live), next));
            }
        }
        kept.sort_by(|a, b| (&a.name, &a.key).cmp(&(&b.name, &b.key)));
        Ok((updates, kept))
    }

    /// Adds a definition's builder values for `key` (the union of all definitions' values
    /// applies; two different values for one property conflict) and returns its live cell.
    fn register(
        &mut self,
        key: &str,
        builder: K::Layer,
    ) -> Result<Arc<PropertyCell<K>>, ConfigError> {
        let Some(cell) = self.cells.get(key) else {
            let props = K::resolve(&self.global(), &builder, &self.instance_layer(key));
            K::validate(&props, &prefix_for::<K>(key), &self.rules)?;
            let first_use = K::INFO
                .iter()
                .filter(|info| !info.dynamic)
                .filter_map(|info| {
                    let top = self.values(Some(key), info.name, Some(&builder));
                    Some((info.name, top.into_iter().next()?))
                })
                .collect();
            let live = Arc::new(PropertyCell::new(props));
            self.cells.insert(
                key.to_owned(),
                Cell {
                    builder,
                    live: Arc::clone(&live),
                    first_use,
                },
            );
            return Ok(live);
        };
        let merged = K::merge(&cell.builder, &builder).map_err(|(name, existing, requested)| {
            ConfigError::ConflictingDefinition {
                key: key.to_owned(),
                what: format!("value for `{}`", K::full_name(Some(key), name)),
                existing,
                requested,
            }
        })?;
        let live = Arc::clone(&cell.live);
        if merged != cell.builder {
            let mut next = K::resolve(&self.global(), &merged, &self.instance_layer(key));
            if let Some(name) = K::keep_fixed(&mut next, &live.load_full()).first() {
                return Err(ConfigError::FixedAfterFirstUse {
                    name: K::full_name(Some(key), name),
                });
            }
            K::validate(&next, &prefix_for::<K>(key), &self.rules)?;
            live.store(next);
            if let Some(cell) = self.cells.get_mut(key) {
                cell.builder = merged;
            }
        }
        Ok(live)
    }

    /// Every value the layers give `property` of `key` (`None`: the global default), highest
    /// precedence first; the last is the code default.
    fn values(
        &self,
        key: Option<&str>,
        property: &'static str,
        builder: Option<&K::Layer>,
    ) -> Vec<LayerValue> {
        let mut values = Vec::new();
        if key.is_some() {
            self.push_dynamic(&mut values, key, property, PropertyLayer::PerKey);
        }
        if let Some(value) = builder.and_then(|builder| K::get_layer(builder, property)) {
            values.push(LayerValue {
                value: Some(value),
                layer: PropertyLayer::Builder,
                origin: Origin::Code,
            });
        }
        self.push_dynamic(&mut values, None, property, PropertyLayer::GlobalDefault);
        values.push(LayerValue {
            value: K::get(&K::Props::default(), property),
            layer: PropertyLayer::CodeDefault,
            origin: Origin::Code,
        });
        values
    }

    /// Adds the values the sources give one dynamic layer, highest first.
    fn push_dynamic(
        &self,
        values: &mut Vec<LayerValue>,
        key: Option<&str>,
        property: &'static str,
        layer: PropertyLayer,
    ) {
        for (_, source) in self.sources.iter().rev() {
            if let Some(value) = source.value(key, property) {
                values.push(LayerValue {
                    value: Some(value),
                    layer,
                    origin: source.origin(key, property),
                });
            }
        }
    }

    /// The effective value of `property` for `key` and where it came from.
    fn explain(
        &self,
        key: Option<&str>,
        property: &'static str,
        full_name: &str,
    ) -> PropertyReport {
        let dynamic = K::INFO
            .iter()
            .find(|info| info.name == property)
            .is_some_and(|info| info.dynamic);
        let cell = key.and_then(|key| self.cells.get(key));
        let mut values = self.values(key, property, cell.map(|cell| &cell.builder));
        let configured = values.remove(0);
        let (effective, pending) = match cell {
            // A fixed property keeps the value it had at the key's first use.
            Some(cell) if !dynamic => {
                let live = K::get(&cell.live.load(), property);
                if live == configured.value {
                    (configured, None)
                } else {
                    let first = cell.first_use.get(property).cloned().unwrap_or(LayerValue {
                        value: live.clone(),
                        layer: configured.layer,
                        origin: configured.origin.clone(),
                    });
                    (
                        LayerValue {
                            value: live,
                            ..first
                        },
                        Some(configured),
                    )
                }
            }
            _ => (configured, None),
        };
        PropertyReport {
            name: full_name.to_owned(),
            value: effective.value,
            layer: effective.layer,
            origin: effective.origin,
            dynamic: dynamic && K::KEYED,
            key_in_use: cell.is_some(),
            pending,
            overridden: values,
        }
    }
}

/// Every kind's layers. A change is staged in place, with what it replaced kept to put back
/// ([`Staged`]): never a copy of the whole store, whose size grows with the number of keys.
#[derive(Default)]
pub(crate) struct StoreState {
    command: Layers<CommandKind>,
    thread_pool: Layers<ThreadPoolKind>,
    collapser: Layers<CollapserKind>,
    /// The global stream properties (no keys, no live cells: read once by their users).
    stream: Layers<StreamKind>,
}

/// A registry's properties: the dynamic global and per-key layers (each fed by files, the
/// environment and run-time changes), and the live snapshot of every key in use. Obtain it with
/// [`Registry::properties`](crate::Registry::properties).
///
/// Names are Hystrix's full names: `hystrix.command.default.<name>`,
/// `hystrix.command.<CommandKey>.<name>`, `hystrix.threadpool.default.<name>`,
/// `hystrix.threadpool.<ThreadPoolKey>.<name>`, `hystrix.collapser.default.<name>`,
/// `hystrix.collapser.<CollapserKey>.<name>` (see the [module docs](crate::config) for the
/// layers and sources), and the global stream properties `hystrix.stream.*` /
/// `hystrix.config.stream.*` (see [`StreamProperties`]).
pub struct Properties {
    state: Arc<Mutex<StoreState>>,
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

/// A handle on a registry's properties that does not keep them alive (a file watcher holds
/// one, so it never outlives the registry's use of its properties).
#[cfg(feature = "reload")]
#[derive(Clone)]
pub(crate) struct WeakProperties(Weak<Mutex<StoreState>>);

#[cfg(feature = "reload")]
impl WeakProperties {
    /// The properties, if their registry still exists.
    pub(crate) fn upgrade(&self) -> Option<Properties> {
        self.0.upgrade().map(|state| Properties { state })
    }
}

/// A parsed full property name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) kind: TargetKind,
    /// `None` for the global default (`...default.<name>`) and the stream properties.
    pub(crate) key: Option<&'a str>,
    pub(crate) property: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TargetKind {
    Command,
    ThreadPool,
    Collapser,
    Stream,
}

/// Runs the generic function `$f::<Kind>` for the property kind `$kind`.
macro_rules! by_kind {
    ($kind:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $kind {
            TargetKind::Command => $f::<CommandKind>($($arg),*),
            TargetKind::ThreadPool => $f::<ThreadPoolKind>($($arg),*),
            TargetKind::Collapser => $f::<CollapserKind>($($arg),*),
            TargetKind::Stream => $f::<StreamKind>($($arg),*),
        }
    };
}

/// Parses a full property name: its kind, key (`None` for `default`) and property.
///
/// # Errors
/// [`ConfigError::UnknownProperty`] for a name that is not a property;
/// [`ConfigError::InvalidKey`] for a key no command, pool or collapser can have.
pub(crate) fn parse_name(full_name: &str) -> Result<Target<'_>, ConfigError> {
    let unknown = || unknown_property(full_name);
    if let Some(property) = full_name
        .strip_prefix(StreamKind::PREFIX)
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

/// [`ConfigError::UnknownProperty`] for `full_name`, with the closest property name if one is
/// close.
fn unknown_property(full_name: &str) -> ConfigError {
    ConfigError::UnknownProperty {
        name: full_name.to_owned(),
        suggestion: super::source::suggest(full_name),
    }
}

/// The error for a value a layer refused, named by its full property name.
pub(crate) fn layer_error(err: LayerError, full_name: &str, value: &PropertyValue) -> ConfigError {
    match err {
        LayerError::Unknown => unknown_property(full_name),
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

/// Checks one value on its own, as every load does before the rules between properties: the
/// name is a property, its key can exist, and the value parses and is in range.
#[cfg_attr(
    not(feature = "serde"),
    allow(dead_code, reason = "sections are read with the serde feature")
)]
pub(crate) fn check_value(full_name: &str, value: &PropertyValue) -> Result<(), ConfigError> {
    let target = parse_name(full_name)?;
    by_kind!(target.kind, check_in(&target, full_name, value))
}

fn check_in<K: PropertyKind>(
    target: &Target<'_>,
    full_name: &str,
    value: &PropertyValue,
) -> Result<(), ConfigError> {
    let mut layer = K::Layer::default();
    K::set(&mut layer, target.property, value, target.key.is_some())
        .map_err(|err| layer_error(err, full_name, value))
}

/// One write into a source: a value to set (`None`: to remove) and where it was written.
pub(crate) struct Write<'a> {
    pub(crate) target: Target<'a>,
    pub(crate) name: &'a str,
    pub(crate) value: Option<PropertyValue>,
    pub(crate) origin: Origin,
}

/// A staged change that failed: the write at fault if one value was refused on its own, and the
/// error (which names the property).
#[derive(Debug)]
pub(crate) struct StageError {
    pub(crate) write: Option<usize>,
    pub(crate) error: ConfigError,
}

/// What a committed change did.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// Full names whose value in the source changed (added, changed or removed), sorted.
    pub(crate) changed: Vec<String>,
    /// Global changes of fixed properties that keys in use do not take.
    pub(crate) fixed_kept: Vec<FixedKept>,
}

/// Puts back what one step of a staged change replaced in the store.
type Undo = Box<dyn FnOnce(&mut StoreState)>;

/// A change applied to the store in place and checked, its snapshots not yet published.
/// [`commit`](Staged::commit) keeps it; dropping it instead (an error, a panic, or a trial
/// staging) puts back everything it replaced, so the store is as it was.
struct Staged<'s> {
    state: &'s mut StoreState,
    /// Last step last: undone in reverse.
    undo: Vec<Undo>,
    command: Updates<CommandKind>,
    thread_pool: Updates<ThreadPoolKind>,
    collapser: Updates<CollapserKind>,
    applied: Applied,
}

impl Staged<'_> {
    /// Keeps the change and publishes the new snapshots.
    fn commit(mut self) -> Applied {
        self.undo.clear();
        publish(std::mem::take(&mut self.command));
        publish(std::mem::take(&mut self.thread_pool));
        publish(std::mem::take(&mut self.collapser));
        for kept in &self.applied.fixed_kept {
            tracing::warn!(
                "hystrix: {} is fixed once a key is in use; `{}` keeps its value, keys created \
                 later use the new one",
                kept.name,
                kept.key
            );
        }
        std::mem::take(&mut self.applied)
    }
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        while let Some(undo) = self.undo.pop() {
            undo(self.state);
        }
    }
}

/// Applies `writes` to `source` (on top of its values, or replacing them all) in `state`, and
/// checks every key the change affects. On error `state` is as it was.
fn stage<'s>(
    state: &'s mut StoreState,
    source: &SourceId,
    writes: &[Write<'_>],
    replace: bool,
) -> Result<Staged<'s>, StageError> {
    let mut staged = Staged {
        state,
        undo: Vec::new(),
        command: Vec::new(),
        thread_pool: Vec::new(),
        collapser: Vec::new(),
        applied: Applied::default(),
    };
    // Each kind is checked on its own: no rule ties a command property to a pool's.
    staged.command = stage_kind::<CommandKind>(&mut staged, source, writes, replace)?;
    staged.thread_pool = stage_kind::<ThreadPoolKind>(&mut staged, source, writes, replace)?;
    staged.collapser = stage_kind::<CollapserKind>(&mut staged, source, writes, replace)?;
    stage_kind::<StreamKind>(&mut staged, source, writes, replace)?;
    staged.applied.changed.sort();
    Ok(staged)
}

fn kind_of<K: PropertyKind>() -> TargetKind {
    match K::PREFIX {
        "hystrix.command." => TargetKind::Command,
        "hystrix.threadpool." => TargetKind::ThreadPool,
        "hystrix.collapser." => TargetKind::Collapser,
        _ => TargetKind::Stream,
    }
}

fn stage_kind<K: PropertyKind>(
    staged: &mut Staged<'_>,
    source: &SourceId,
    writes: &[Write<'_>],
    replace: bool,
) -> Result<Updates<K>, StageError> {
    let kind = kind_of::<K>();
    let writes: Vec<(usize, &Write<'_>)> = writes
        .iter()
        .enumerate()
        .filter(|(_, write)| write.target.kind == kind)
        .collect();
    if writes.is_empty() && !replace {
        return Ok(Vec::new());
    }
    let layers = K::of_mut(staged.state);
    let (changes, undo) = if replace {
        // Every kind lists a replaced source, even one without values of its kind, so files
        // rank the same in every kind.
        let mut values = Dynamic::default();
        for &(index, write) in &writes {
            values.write(index, write)?;
        }
        layers.replace_source(source, values)
    } else {
        layers.patch_source(source, &writes)?
    };
    staged.undo.push(undo);
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    staged.applied.changed.extend(
        changes
            .iter()
            .map(|(key, property)| K::full_name(key.as_deref(), property)),
    );
    let (updates, kept) = K::of(staged.state)
        .check(&changes)
        .map_err(|error| StageError { write: None, error })?;
    staged.applied.fixed_kept.extend(kept);
    Ok(updates)
}

/// Stores new snapshots in their live cells.
fn publish<K: PropertyKind>(updates: Updates<K>) {
    for (cell, props) in updates {
        cell.store(props);
    }
}

fn explain_in<K: PropertyKind>(
    state: &StoreState,
    target: &Target<'_>,
    full_name: &str,
) -> PropertyReport {
    K::of(state).explain(target.key, target.property, full_name)
}

fn get_in<K: PropertyKind>(state: &StoreState, target: &Target<'_>) -> Option<PropertyValue> {
    K::get(&K::of(state).resolved(target.key), target.property)
}

fn runtime_value_in<K: PropertyKind>(
    state: &StoreState,
    target: &Target<'_>,
) -> Option<PropertyValue> {
    K::of(state)
        .source(&SourceId::Runtime)
        .and_then(|values| values.value(target.key, target.property))
}

impl Properties {
    pub(crate) fn new(rules: Rules) -> Self {
        let mut state = StoreState::default();
        state.command.rules = rules;
        state.thread_pool.rules = rules;
        state.collapser.rules = rules;
        state.stream.rules = rules;
        Properties {
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// What the registry allows (the same in every kind).
    pub(crate) fn rules(&self) -> Rules {
        self.state.lock().command.rules
    }

    /// A handle that does not keep these properties alive.
    #[cfg(feature = "reload")]
    pub(crate) fn downgrade(&self) -> WeakProperties {
        WeakProperties(Arc::downgrade(&self.state))
    }

    /// Sets a dynamic property by its full Hystrix name, as a run-time value: it ranks above
    /// the values of files and the environment in its layer, survives their
    /// reloads, and applies to the next execution.
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
    ///
    /// # Cost
    /// A per-key property (`hystrix.command.<Key>.<name>`) re-resolves the snapshot of that key
    /// only: a `set` costs the same with 20 000 keys in use as with 10 (a few microseconds; see
    /// the `config` bench). A global default (`hystrix.command.default.<name>`) applies to every
    /// key in use, so it re-resolves and checks each of them: its cost grows with their number.
    pub fn set(&self, full_name: &str, value: impl Into<PropertyValue>) -> Result<(), ConfigError> {
        let value = value.into();
        let shown = value.to_string();
        self.set_all([(full_name, value)])
            .map_err(|err| name_the_change(err, full_name, &shown))
    }

    /// Sets several properties at once, as run-time values: all of them apply, or (on any
    /// error) none. The rules tying properties together are checked on the result, so values
    /// that are only valid together can be set together, in any order:
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
        let writes = values
            .into_iter()
            .map(|(full_name, value)| {
                Ok(Write {
                    target: parse_name(full_name)?,
                    name: full_name,
                    value: Some(value.into()),
                    origin: Origin::Runtime,
                })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        let mut state = self.state.lock();
        stage(&mut state, &SourceId::Runtime, &writes, false)
            .map_err(|e| e.error)?
            .commit();
        Ok(())
    }

    /// Removes a run-time value set with [`set`](Properties::set); lower sources and layers
    /// apply again from the next execution (a value from a file or the environment, else the
    /// builder's or the global default). Returns whether a run-time value was removed.
    ///
    /// # Errors
    /// As [`set`](Properties::set): an unknown name, or a removal that would leave some key's
    /// properties invalid or change a fixed property of a key in use.
    pub fn unset(&self, full_name: &str) -> Result<bool, ConfigError> {
        let target = parse_name(full_name)?;
        let mut state = self.state.lock();
        if by_kind!(target.kind, runtime_value_in(&state, &target)).is_none() {
            return Ok(false);
        }
        let write = Write {
            target,
            name: full_name,
            value: None,
            origin: Origin::Runtime,
        };
        stage(&mut state, &SourceId::Runtime, &[write], false)
            .map_err(|e| name_the_change(e.error, full_name, "(unset)"))?
            .commit();
        Ok(true)
    }

    /// The effective value of a property by its full name: for a key in use its live value,
    /// otherwise what a new key would get. `Ok(None)` for an unset optional property.
    ///
    /// # Errors
    /// [`ConfigError::UnknownProperty`] for a name that is not a property.
    pub fn get(&self, full_name: &str) -> Result<Option<PropertyValue>, ConfigError> {
        let target = parse_name(full_name)?;
        let state = self.state.lock();
        Ok(by_kind!(target.kind, get_in(&state, &target)))
    }

    /// The effective value of a property by its full name (as [`get`](Properties::get)), with
    /// the layer and source that gave it and the values it hides: for example that
    /// `hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds` is 250, per
    /// key, set by `/etc/app/hystrix.properties:12`, over 400 from the builder.
    ///
    /// ```
    /// use hystrix::config::{Origin, PropertyLayer};
    /// use hystrix::PropertyValue;
    ///
    /// let registry = hystrix::Registry::new();
    /// let name = "hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds";
    /// registry.properties().set(name, 250)?;
    /// let report = registry.properties().explain(name)?;
    /// assert_eq!(report.value, Some(PropertyValue::Int(250)));
    /// assert_eq!((report.layer, report.origin), (PropertyLayer::PerKey, Origin::Runtime));
    /// assert_eq!(report.overridden[0].layer, PropertyLayer::CodeDefault); // 1000
    /// # Ok::<(), hystrix::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// [`ConfigError::UnknownProperty`] for a name that is not a property,
    /// [`ConfigError::InvalidKey`] for a key that cannot exist.
    pub fn explain(&self, full_name: &str) -> Result<PropertyReport, ConfigError> {
        let target = parse_name(full_name)?;
        let state = self.state.lock();
        Ok(by_kind!(
            target.kind,
            explain_in(&state, &target, full_name)
        ))
    }

    /// Replaces every value `source` gives with `writes`, all or nothing: the whole result is
    /// checked before it is swapped in.
    ///
    /// When a rule between properties fails, the error's `write` is the first write at which
    /// the writes, taken in order, break that rule (the line that made the file invalid, read
    /// top to bottom); `None` if the rule breaks without any of them (a value the source gave
    /// before was removed).
    pub(crate) fn replace_source(
        &self,
        source: &SourceId,
        writes: &[Write<'_>],
    ) -> Result<Applied, StageError> {
        let mut state = self.state.lock();
        let outcome = stage(&mut state, source, writes, true).map(Staged::commit);
        match outcome {
            Ok(applied) => Ok(applied),
            // A fixed property of a key in use: the write of that property changed it (none:
            // the source no longer gives it).
            Err(StageError {
                write: None,
                error: error @ ConfigError::FixedAfterFirstUse { .. },
            }) => {
                let ConfigError::FixedAfterFirstUse { name } = &error else {
                    unreachable!("matched FixedAfterFirstUse above")
                };
                let culprit = writes.iter().rposition(|write| write.name == name.as_str());
                Err(StageError {
                    write: culprit,
                    error,
                })
            }
            Err(StageError { write: None, error }) => {
                let same = |err: &StageError| err.error == error;
                // Only on a refused load: one staging per write, each undone.
                let culprit = (0..=writes.len())
                    .find(|&end| {
                        stage(&mut state, source, &writes[..end], true)
                            .err()
                            .is_some_and(|err| same(&err))
                    })
                    .and_then(|end| end.checked_sub(1));
                Err(StageError {
                    write: culprit,
                    error,
                })
            }
            Err(err) => Err(err),
        }
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

    /// The stream properties: the values set, else Hystrix's defaults.
    pub fn stream(&self) -> StreamProperties {
        self.state.lock().stream.resolved(None)
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

/// A change of `full_name` (to `value`) broke a rule through another property: the error names
/// the property changed, and the one it conflicts with.
fn name_the_change(err: ConfigError, full_name: &str, value: &str) -> ConfigError {
    name_the_value(
        err,
        full_name,
        value,
        " (change both at once with Properties::set_all)",
    )
}

/// `err` (a rule that broke) as an error of the value `full_name` = `value` that broke it,
/// naming the property it conflicts with; `hint` ends the reason.
pub(crate) fn name_the_value(
    err: ConfigError,
    full_name: &str,
    value: &str,
    hint: &str,
) -> ConfigError {
    match err {
        ConfigError::InvalidValue {
            name,
            value: other_value,
            reason,
        } if name != full_name => ConfigError::InvalidValue {
            name: full_name.to_owned(),
            value: value.to_owned(),
            reason: format!(
                "conflicts with `{}` = {}, which {reason}{hint}",
                crate::error::shown(&name, 256),
                crate::error::shown(&other_value, 256)
            ),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map at a property's name in a settings section is refused (`config::section`): that
    /// needs no property's name to be a dotted start of another's.
    #[test]
    fn no_property_name_starts_another() {
        for info in [CommandKind::INFO, ThreadPoolKind::INFO, CollapserKind::INFO] {
            for p in info {
                for q in info {
                    let start = format!("{}.", p.name);
                    assert!(!q.name.starts_with(&start), "{} starts {}", p.name, q.name);
                }
            }
        }
    }

    #[test]
    fn stream_properties_are_global_and_validated() {
        let p = Properties::new(Rules::default());
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
        assert_eq!(p.stream().write_timeout_in_milliseconds, 1500);
        p.set("hystrix.stream.writeTimeoutInMilliseconds", "200")
            .unwrap();
        assert_eq!(p.stream().write_timeout_in_milliseconds, 200);
        for bad in ["0", "-1", "1.5", "soon"] {
            let err = p
                .set("hystrix.stream.writeTimeoutInMilliseconds", bad)
                .unwrap_err();
            assert!(
                err.to_string().starts_with(&format!(
                    "invalid value `{bad}` for `hystrix.stream.writeTimeoutInMilliseconds`: "
                )),
                "{err}"
            );
        }
        assert_eq!(
            p.set("hystrix.stream.writeTimeoutInMilliseconds", 0)
                .unwrap_err()
                .to_string(),
            "invalid value `0` for `hystrix.stream.writeTimeoutInMilliseconds`: must be at \
             least 1 ms"
        );
        assert_eq!(p.stream().write_timeout_in_milliseconds, 200);
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
        let p = Properties::new(Rules::default());
        let name = "execution.isolation.thread.timeoutInMilliseconds";
        assert_eq!(timeout_of(&p, "A"), 1000);
        p.set(&format!("hystrix.command.default.{name}"), 700)
            .unwrap();
        assert_eq!(timeout_of(&p, "A"), 700);

        // A builder value hides the dynamic global default ...
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
        let p = Properties::new(Rules::default());
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
                "maybe".into(),
                "invalid value `maybe` for `hystrix.command.default.circuitBreaker.forceOpen`: expected true or false (or Archaius' yes/no, on/off, y/n, t/f)",
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
        let p = Properties::new(Rules::default());
        for name in [
            "hystrix.command.A.execution.timeoutInMillis",
            "hystrix.command.execution.isolation.thread.timeoutInMilliseconds",
            "hystrix.other.A.coreSize",
            "coreSize",
        ] {
            assert!(
                matches!(
                    p.set(name, 1).unwrap_err(),
                    ConfigError::UnknownProperty { name: given, .. } if given == name
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn a_misspelt_name_set_in_code_gets_a_suggestion() {
        let p = Properties::new(Rules::default());
        let name = "hystrix.command.GetOrder.execution.isolation.thread.timeoutInMiliseconds";
        let err = p.set(name, 500).unwrap_err();
        assert_eq!(
            err,
            ConfigError::UnknownProperty {
                name: name.to_owned(),
                suggestion: Some(
                    "hystrix.command.GetOrder.execution.isolation.thread.timeoutInMilliseconds"
                        .to_owned()
                ),
            }
        );
        assert_eq!(
            err.to_string(),
            "unknown property \
             `hystrix.command.GetOrder.execution.isolation.thread.timeoutInMiliseconds`; did you \
             mean `hystrix.command.GetOrder.execution.isolation.thread.timeoutInMilliseconds`?"
        );
        // From the builder too, which names the full property.
        let err = crate::Command::builder("GetOrder")
            .group("Orders")
            .property("execution.isolation.thread.timeoutInMiliseconds", 500)
            .build_in(&crate::Registry::new())
            .unwrap_err();
        assert!(err.to_string().ends_with(
            "did you mean `hystrix.command.GetOrder.execution.isolation.thread.timeoutInMilliseconds`?"
        ));
    }

    #[test]
    fn keys_with_dots_resolve() {
        let p = Properties::new(Rules::default());
        p.set("hystrix.command.svc.users.GetUser.fallback.enabled", false)
            .unwrap();
        assert!(!p.command(&key("svc.users.GetUser")).fallback_enabled);
    }

    #[test]
    fn fixed_properties_cannot_change_for_a_key_in_use() {
        let p = Properties::new(Rules::default());
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
        let p = Properties::new(Rules::default());
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

    /// The work (`WORK`) that `change` does on this thread.
    fn work_of(change: impl FnOnce()) -> usize {
        WORK.with(|work| work.set(0));
        change();
        WORK.with(std::cell::Cell::get)
    }

    #[test]
    fn a_per_key_change_works_on_its_own_key_only_whatever_the_number_of_keys() {
        const KEYS: usize = 20_000;
        let p = Properties::new(Rules::default());
        let cells: Vec<_> = (0..KEYS)
            .map(|n| {
                p.register_command(&key(&format!("K{n}")), CommandLayer::default())
                    .unwrap()
            })
            .collect();
        // A run-time value for every key, as an admin tool may leave them.
        let names: Vec<String> = (0..KEYS)
            .map(|n| format!("hystrix.command.K{n}.circuitBreaker.requestVolumeThreshold"))
            .collect();
        p.set_all(names.iter().map(|name| (name.as_str(), 5)))
            .unwrap();
        let other = cells[KEYS - 1].load_full();

        let timeout = "hystrix.command.K0.execution.isolation.thread.timeoutInMilliseconds";
        let work = work_of(|| p.set(timeout, 250).unwrap());
        assert!(work <= 2, "one per-key set did {work} units of work");
        assert_eq!(cells[0].load().execution_timeout_in_milliseconds, 250);
        // No other key's snapshot was even republished.
        assert!(Arc::ptr_eq(&other, &cells[KEYS - 1].load_full()));
        let work = work_of(|| assert!(p.unset(timeout).unwrap()));
        assert!(work <= 2, "one per-key unset did {work} units of work");
        assert_eq!(cells[0].load().execution_timeout_in_milliseconds, 1000);
        // A refused per-key value costs as little.
        let work = work_of(|| assert!(p.set(timeout, 0).is_err()));
        assert!(work <= 2, "a refused per-key set did {work} units of work");

        // A global default reaches every key in use: that work is inherent.
        let global = "hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds";
        let work = work_of(|| p.set(global, 300).unwrap());
        assert!(work >= KEYS, "{work}");
        assert!(
            cells
                .iter()
                .all(|cell| cell.load().execution_timeout_in_milliseconds == 300)
        );
    }

    #[test]
    fn a_refused_change_puts_back_every_kind_and_origin_it_touched() {
        let p = Properties::new(Rules::default());
        let cell = p
            .register_command(&key("A"), CommandLayer::default())
            .unwrap();
        let timeout = "hystrix.command.A.execution.isolation.thread.timeoutInMilliseconds";
        let volume = "hystrix.command.A.circuitBreaker.requestVolumeThreshold";
        p.set(volume, 7).unwrap();
        let before = cell.load_full();
        // The command values are staged and checked before the pool's value is refused.
        let err = p
            .set_all([
                (timeout, PropertyValue::Int(250)),
                (volume, PropertyValue::Int(9)),
                ("hystrix.command.B.fallback.enabled", false.into()),
                ("hystrix.threadpool.P.coreSize", 0.into()),
            ])
            .unwrap_err();
        assert!(
            err.to_string().contains("hystrix.threadpool.P.coreSize"),
            "{err}"
        );
        assert!(Arc::ptr_eq(&before, &cell.load_full()));
        assert_eq!(p.get(timeout).unwrap(), Some(PropertyValue::Int(1000)));
        assert_eq!(p.get(volume).unwrap(), Some(PropertyValue::Int(7)));
        assert!(p.command(&key("B")).fallback_enabled);
        let report = p.explain(timeout).unwrap();
        assert_eq!(report.layer, PropertyLayer::CodeDefault);
        // Nothing of it is left in the run-time source: unsetting finds nothing to remove.
        assert!(!p.unset(timeout).unwrap());
        assert!(!p.unset("hystrix.command.B.fallback.enabled").unwrap());

        // A staging dropped without its commit (as the search for a refused file's culprit
        // line does) puts everything back too.
        let mut state = p.state.lock();
        let write = Write {
            target: parse_name(volume).unwrap(),
            name: volume,
            value: Some(PropertyValue::Int(11)),
            origin: Origin::Runtime,
        };
        let staged = stage(&mut state, &SourceId::Runtime, &[write], false).unwrap();
        assert_eq!(staged.command.len(), 1);
        drop(staged);
        drop(state);
        assert_eq!(p.get(volume).unwrap(), Some(PropertyValue::Int(7)));
        assert!(Arc::ptr_eq(&before, &cell.load_full()));
    }

    #[test]
    fn thread_pool_properties_validate() {
        let p = Properties::new(Rules::default());
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
