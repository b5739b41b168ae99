//! Delta's column mapping (`delta.columnMapping.mode` `name` or `id`, as
//! Spark and Databricks set it to rename or drop columns): a table's files
//! name their columns by physical names (and Parquet field ids), and its
//! partition values are keyed by physical names, all of which stay when a
//! column is renamed; the schema gives each its logical name. The
//! Parquet reader renames a file's columns by these maps
//! ([`crate::connector::parquet::Rows::field_ids`]).

use std::collections::HashMap;

use delta_kernel::schema::{ColumnMetadataKey, MetadataValue, StructType};

/// A schema's column mapping.
#[derive(Debug, Default)]
pub struct ColumnMapping {
    /// Logical names by field id.
    pub ids: HashMap<i32, String>,
    /// Field ids by physical name.
    pub physical: HashMap<String, i32>,
}

impl ColumnMapping {
    /// The mapping of `schema`; `None` for a table without one.
    pub fn of(schema: &StructType) -> Option<Self> {
        let mut mapping = Self::default();
        for (i, field) in schema.fields().enumerate() {
            let Some(MetadataValue::String(physical)) =
                field.get_config_value(&ColumnMetadataKey::ColumnMappingPhysicalName)
            else {
                continue;
            };
            // A field without an id (not in mode `id`) gets one of its own.
            let id = field
                .column_mapping_id()
                .and_then(|id| i32::try_from(id).ok())
                .unwrap_or(-1 - i as i32);
            mapping.ids.insert(id, field.name().clone());
            mapping.physical.insert(physical.clone(), id);
        }
        (!mapping.physical.is_empty()).then_some(mapping)
    }

    /// Gives partition values (keyed by physical names) their columns'
    /// logical names.
    pub fn name_partitions<'a>(
        &self,
        partitions: impl Iterator<Item = &'a mut Vec<(String, Option<String>)>>,
    ) {
        for values in partitions {
            for (name, _) in values.iter_mut() {
                if let Some(logical) = self
                    .physical
                    .get(name.as_str())
                    .and_then(|id| self.ids.get(id))
                {
                    *name = logical.clone();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use delta_kernel::schema::{DataType, StructField};

    #[test]
    fn physical_names_and_ids_map_to_logical_names() {
        let field = |name: &str, id: Option<i64>, physical: &str| {
            let mut metadata = vec![(
                ColumnMetadataKey::ColumnMappingPhysicalName
                    .as_ref()
                    .to_string(),
                MetadataValue::String(physical.into()),
            )];
            if let Some(id) = id {
                metadata.push((
                    ColumnMetadataKey::ColumnMappingId.as_ref().to_string(),
                    MetadataValue::Number(id),
                ));
            }
            StructField::nullable(name, DataType::STRING).with_metadata(metadata)
        };
        let schema = StructType::try_new([
            field("label", Some(2), "col-b"),
            field("part", None, "col-c"),
        ])
        .unwrap();
        let m = ColumnMapping::of(&schema).unwrap();
        assert_eq!(m.ids[&m.physical["col-b"]], "label");
        assert_eq!(m.physical["col-b"], 2);
        assert_eq!(m.ids[&m.physical["col-c"]], "part");
        let mut values = [vec![
            ("col-c".to_string(), Some("x".to_string())),
            ("other".to_string(), None),
        ]];
        m.name_partitions(values.iter_mut());
        assert_eq!(values[0][0].0, "part");
        assert_eq!(values[0][1].0, "other");
        let plain = StructType::try_new([StructField::nullable("a", DataType::STRING)]).unwrap();
        assert!(ColumnMapping::of(&plain).is_none());
    }
}
