//! Reading rows back. Rows are input: with the `actor_uds` backend they come
//! from a socket. [`Row`] checks a row's width and each value's type and
//! answers [`DbError::CorruptRow`] instead of indexing blindly or turning a
//! wrong value into a default; NULL is accepted only where the caller says
//! the column is nullable. Every store decodes through it.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{DbError, Rows, SqlValue};

pub fn corrupt(table: &str, message: impl Into<String>) -> DbError {
    DbError::CorruptRow {
        table: table.to_owned(),
        message: message.into(),
    }
}

fn type_name(v: &SqlValue) -> &'static str {
    match v {
        SqlValue::Null => "NULL",
        SqlValue::Integer(_) => "an integer",
        SqlValue::Real(_) => "a real",
        SqlValue::Text(_) => "text",
        SqlValue::Blob(_) => "a blob",
    }
}

/// One row read back, its width checked. Each column is taken once.
pub struct Row {
    table: &'static str,
    values: Vec<SqlValue>,
}

impl Row {
    pub fn new(table: &'static str, values: Vec<SqlValue>, width: usize) -> Result<Row, DbError> {
        if values.len() != width {
            return Err(corrupt(
                table,
                format!("{} columns, expected {width}", values.len()),
            ));
        }
        Ok(Row { table, values })
    }

    /// The first row of `rows`, if any.
    pub fn optional(rows: Rows, table: &'static str, width: usize) -> Result<Option<Row>, DbError> {
        rows.rows
            .into_iter()
            .next()
            .map(|values| Row::new(table, values, width))
            .transpose()
    }

    /// The first row of `rows`, which must be there.
    pub fn first(rows: Rows, table: &'static str, width: usize) -> Result<Row, DbError> {
        Row::optional(rows, table, width)?.ok_or_else(|| corrupt(table, "the row is missing"))
    }

    /// Every row of `rows`, each decoded by `decode`.
    pub fn all<T>(
        rows: Rows,
        table: &'static str,
        width: usize,
        mut decode: impl FnMut(Row) -> Result<T, DbError>,
    ) -> Result<Vec<T>, DbError> {
        rows.rows
            .into_iter()
            .map(|values| decode(Row::new(table, values, width)?))
            .collect()
    }

    fn take(&mut self, i: usize) -> Result<SqlValue, DbError> {
        match self.values.get_mut(i) {
            Some(v) => Ok(std::mem::replace(v, SqlValue::Null)),
            None => Err(corrupt(self.table, format!("no column {i}"))),
        }
    }

    fn wrong(&self, i: usize, expected: &str, found: &SqlValue) -> DbError {
        corrupt(
            self.table,
            format!(
                "column {i}: expected {expected}, found {}",
                type_name(found)
            ),
        )
    }

    pub fn text(&mut self, i: usize) -> Result<String, DbError> {
        match self.take(i)? {
            SqlValue::Text(t) => Ok(t),
            other => Err(self.wrong(i, "text", &other)),
        }
    }

    pub fn opt_text(&mut self, i: usize) -> Result<Option<String>, DbError> {
        match self.take(i)? {
            SqlValue::Null => Ok(None),
            SqlValue::Text(t) => Ok(Some(t)),
            other => Err(self.wrong(i, "text or NULL", &other)),
        }
    }

    pub fn int(&mut self, i: usize) -> Result<i64, DbError> {
        match self.take(i)? {
            SqlValue::Integer(v) => Ok(v),
            other => Err(self.wrong(i, "an integer", &other)),
        }
    }

    pub fn opt_int(&mut self, i: usize) -> Result<Option<i64>, DbError> {
        match self.take(i)? {
            SqlValue::Null => Ok(None),
            SqlValue::Integer(v) => Ok(Some(v)),
            other => Err(self.wrong(i, "an integer or NULL", &other)),
        }
    }

    /// A count: a non-negative integer.
    pub fn uint(&mut self, i: usize) -> Result<u64, DbError> {
        let v = self.int(i)?;
        u64::try_from(v).map_err(|_| corrupt(self.table, format!("column {i}: {v} is negative")))
    }

    /// A 0/1 flag.
    pub fn flag(&mut self, i: usize) -> Result<bool, DbError> {
        match self.int(i)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(corrupt(
                self.table,
                format!("column {i}: {v} is not 0 or 1"),
            )),
        }
    }

    pub fn blob(&mut self, i: usize) -> Result<Vec<u8>, DbError> {
        match self.take(i)? {
            SqlValue::Blob(b) => Ok(b),
            other => Err(self.wrong(i, "a blob", &other)),
        }
    }

    pub fn opt_blob(&mut self, i: usize) -> Result<Option<Vec<u8>>, DbError> {
        match self.take(i)? {
            SqlValue::Null => Ok(None),
            SqlValue::Blob(b) => Ok(Some(b)),
            other => Err(self.wrong(i, "a blob or NULL", &other)),
        }
    }

    /// A NOT NULL JSON column, parsed into `T`.
    pub fn json<T: DeserializeOwned>(&mut self, i: usize) -> Result<T, DbError> {
        let text = self.text(i)?;
        serde_json::from_str(&text)
            .map_err(|e| corrupt(self.table, format!("column {i}: unexpected JSON: {e}")))
    }

    /// A nullable JSON column.
    pub fn opt_json(&mut self, i: usize) -> Result<Option<Value>, DbError> {
        match self.opt_text(i)? {
            None => Ok(None),
            Some(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| corrupt(self.table, format!("column {i}: invalid JSON: {e}"))),
        }
    }

    /// A NOT NULL text column of a closed vocabulary.
    pub fn parse<T>(
        &mut self,
        i: usize,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, DbError> {
        let text = self.text(i)?;
        parse(&text).ok_or_else(|| {
            corrupt(
                self.table,
                format!("column {i}: {text:?} is outside its vocabulary"),
            )
        })
    }

    /// A nullable text column of a closed vocabulary.
    pub fn opt_parse<T>(
        &mut self,
        i: usize,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, DbError> {
        match self.opt_text(i)? {
            None => Ok(None),
            Some(text) => parse(&text).map(Some).ok_or_else(|| {
                corrupt(
                    self.table,
                    format!("column {i}: {text:?} is outside its vocabulary"),
                )
            }),
        }
    }
}

/// The one non-negative integer a query selects (a count).
pub fn count(rows: Rows, table: &'static str) -> Result<u64, DbError> {
    Row::first(rows, table, 1)?.uint(0)
}

/// Rows of one NOT NULL text column.
pub fn texts(rows: Rows, table: &'static str) -> Result<Vec<String>, DbError> {
    Row::all(rows, table, 1, |mut r| r.text(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(values: Vec<Vec<SqlValue>>) -> Rows {
        Rows {
            rows: values,
            ..Rows::default()
        }
    }

    #[test]
    fn wrong_widths_types_and_vocabularies_are_corrupt() {
        let code = |e: DbError| e.code();
        assert_eq!(
            count(rows(vec![vec![1.into(), 2.into()]]), "t").map_err(code),
            Err("corrupt_row")
        );
        assert_eq!(count(rows(vec![]), "t").map_err(code), Err("corrupt_row"));
        assert_eq!(
            count(rows(vec![vec![SqlValue::Integer(-1)]]), "t").map_err(code),
            Err("corrupt_row")
        );
        assert_eq!(
            texts(rows(vec![vec![SqlValue::Blob(vec![1])]]), "t").map_err(code),
            Err("corrupt_row")
        );
        let mut r =
            Row::new("t", vec![2.into(), "maybe".into(), SqlValue::Null], 3).expect("width");
        assert_eq!(r.flag(0).map_err(code), Err("corrupt_row"));
        assert_eq!(
            r.parse(1, |t| (t == "yes").then_some(())).map_err(code),
            Err("corrupt_row")
        );
        assert_eq!(r.blob(2).map_err(code), Err("corrupt_row"));
        assert_eq!(r.opt_blob(2), Ok(None));
    }
}
