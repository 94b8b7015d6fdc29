//! A MessagePack reader for the AMDGPU metadata note (AMDGPUUsage "Code Object V3+ Metadata": the
//! note `AMDGPU` / `NT_AMDGPU_METADATA` holds one MessagePack map). Only what that map uses is read;
//! nesting is bounded so a hostile note cannot exhaust the stack.

use crate::SimError;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

impl Value {
    /// The value under a string key of a map.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(kv) => kv
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

const MAX_DEPTH: usize = 32;

/// Parse one value from the start of `bytes`.
pub fn parse(bytes: &[u8]) -> Result<Value, SimError> {
    let mut r = Reader { b: bytes, at: 0 };
    r.value(0)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

fn bad(what: impl Into<String>) -> SimError {
    SimError::BadMetadata(what.into())
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], SimError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| bad(format!("truncated at byte {}", self.at)))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64, SimError> {
        Ok(self.take(n)?.iter().fold(0u64, |a, &x| a << 8 | x as u64))
    }

    fn value(&mut self, depth: usize) -> Result<Value, SimError> {
        if depth > MAX_DEPTH {
            return Err(bad("nesting deeper than 32"));
        }
        let t = self.take(1)?[0];
        Ok(match t {
            0x00..=0x7f => Value::Int(t as i64),
            0x80..=0x8f => self.map((t & 0xf) as usize, depth)?,
            0x90..=0x9f => self.array((t & 0xf) as usize, depth)?,
            0xa0..=0xbf => self.str((t & 0x1f) as usize)?,
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let n = self.uint(1 << (t - 0xc4))? as usize;
                Value::Bin(self.take(n)?.to_vec())
            }
            0xca => Value::Float(f32::from_bits(self.uint(4)? as u32) as f64),
            0xcb => Value::Float(f64::from_bits(self.uint(8)?)),
            0xcc..=0xcf => {
                let v = self.uint(1 << (t - 0xcc))?;
                Value::Int(i64::try_from(v).map_err(|_| bad("integer past i64"))?)
            }
            0xd0..=0xd3 => {
                let n = 1usize << (t - 0xd0);
                let v = self.uint(n)?;
                let shift = 64 - 8 * n as u32;
                Value::Int(((v << shift) as i64) >> shift)
            }
            0xd9..=0xdb => {
                let n = self.uint(1 << (t - 0xd9))? as usize;
                self.str(n)?
            }
            0xdc | 0xdd => {
                let n = self.uint(if t == 0xdc { 2 } else { 4 })? as usize;
                self.array(n, depth)?
            }
            0xde | 0xdf => {
                let n = self.uint(if t == 0xde { 2 } else { 4 })? as usize;
                self.map(n, depth)?
            }
            0xe0..=0xff => Value::Int(t as i8 as i64),
            _ => return Err(bad(format!("unsupported type byte {t:#04x}"))),
        })
    }

    fn str(&mut self, n: usize) -> Result<Value, SimError> {
        Ok(Value::Str(
            String::from_utf8_lossy(self.take(n)?).into_owned(),
        ))
    }

    fn array(&mut self, n: usize, depth: usize) -> Result<Value, SimError> {
        // Each element takes at least one byte: a count past the rest of the input is a lie.
        if n > self.b.len() - self.at {
            return Err(bad(format!("array of {n} past the end")));
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(v))
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Value, SimError> {
        if n > self.b.len() - self.at {
            return Err(bad(format!("map of {n} past the end")));
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let k = self.value(depth + 1)?;
            let x = self.value(depth + 1)?;
            v.push((k, x));
        }
        Ok(Value::Map(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_nested_map() {
        // {"a": [1, -2, "xy"], "b": 300} written by hand from the MessagePack spec's type bytes.
        let b = [
            0x82, 0xa1, b'a', 0x93, 0x01, 0xfe, 0xa2, b'x', b'y', 0xa1, b'b', 0xcd, 0x01, 0x2c,
        ];
        let v = parse(&b).unwrap();
        let a = v.get("a").unwrap().as_array().unwrap();
        assert_eq!(a[0], Value::Int(1));
        assert_eq!(a[1], Value::Int(-2));
        assert_eq!(a[2].as_str(), Some("xy"));
        assert_eq!(v.get("b").unwrap().as_i64(), Some(300));
    }

    #[test]
    fn truncation_and_lying_counts_are_errors() {
        assert!(parse(&[0x82, 0xa1]).is_err());
        assert!(parse(&[0xdd, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(parse(&[0x91; 64]).is_err());
    }
}
