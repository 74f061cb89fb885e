//! DynamoDB's expression language, as much of it as the key-value store sends: conditions
//! (`attribute_exists`, `attribute_not_exists`, `begins_with`, comparisons, `BETWEEN`,
//! `AND`, `OR`, `NOT`, parentheses), key conditions (the same grammar) and update
//! expressions (`SET a = v`, `REMOVE a`, `ADD n v`). Values are DynamoDB JSON
//! (`{"B": base64}`, `{"N": "1"}`, `{"S": ".."}`, `{"BOOL": true}`); a comparison of two
//! different types is false, as on AWS.

use std::cmp::Ordering;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value};

/// An item: attribute name to DynamoDB JSON value.
pub type Item = Map<String, Value>;

/// The placeholders of a request: `#name` -> attribute, `:value` -> value.
#[derive(Default)]
pub struct Names<'a> {
    pub names: Option<&'a Map<String, Value>>,
    pub values: Option<&'a Map<String, Value>>,
}

impl Names<'_> {
    fn attribute(&self, token: &str) -> Result<String, String> {
        match token.strip_prefix('#') {
            Some(_) => self
                .names
                .and_then(|n| n.get(token))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("ExpressionAttributeNames has no {token}")),
            None => Ok(token.to_owned()),
        }
    }

    fn value(&self, token: &str) -> Result<Value, String> {
        self.values
            .and_then(|v| v.get(token))
            .cloned()
            .ok_or_else(|| format!("ExpressionAttributeValues has no {token}"))
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Open,
    Close,
    Comma,
    Compare(&'static str),
}

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            ' ' | '\t' | '\n' => {
                chars.next();
            }
            '(' => {
                chars.next();
                out.push(Token::Open);
            }
            ')' => {
                chars.next();
                out.push(Token::Close);
            }
            ',' => {
                chars.next();
                out.push(Token::Comma);
            }
            '=' => {
                chars.next();
                out.push(Token::Compare("="));
            }
            '<' | '>' => {
                chars.next();
                let op = match (c, chars.peek()) {
                    ('<', Some('=')) => "<=",
                    ('<', Some('>')) => "<>",
                    ('>', Some('=')) => ">=",
                    ('<', _) => "<",
                    _ => ">",
                };
                if op.len() == 2 {
                    chars.next();
                }
                out.push(Token::Compare(op));
            }
            c if c.is_alphanumeric() || c == '#' || c == ':' || c == '_' => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_alphanumeric() || c == '#' || c == ':' || c == '_' {
                        word.push(c);
                        chars.next();
                    } else {
                        break;
                    }
                }
                out.push(Token::Word(word));
            }
            other => return Err(format!("unexpected {other:?} in {text:?}")),
        }
    }
    Ok(out)
}

/// An operand: an attribute (by its real name) or a value.
#[derive(Debug, Clone)]
enum Operand {
    Path(String),
    Value(Value),
}

#[derive(Debug, Clone)]
enum Cond {
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
    Not(Box<Cond>),
    Exists(String),
    NotExists(String),
    BeginsWith(Operand, Operand),
    Compare(Operand, &'static str, Operand),
    Between(Operand, Operand, Operand),
}

struct Parser<'a, 'n> {
    tokens: Vec<Token>,
    at: usize,
    names: &'a Names<'n>,
}

impl Parser<'_, '_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Result<Token, String> {
        let token = self
            .tokens
            .get(self.at)
            .cloned()
            .ok_or("the expression ends early")?;
        self.at += 1;
        Ok(token)
    }

    fn keyword(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Word(w)) if w.eq_ignore_ascii_case(word))
    }

    fn expect(&mut self, token: Token) -> Result<(), String> {
        let got = self.next()?;
        if got == token {
            Ok(())
        } else {
            Err(format!("expected {token:?}, got {got:?}"))
        }
    }

    fn or(&mut self) -> Result<Cond, String> {
        let mut left = self.and()?;
        while self.keyword("OR") {
            self.at += 1;
            left = Cond::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Cond, String> {
        let mut left = self.not()?;
        while self.keyword("AND") {
            self.at += 1;
            left = Cond::And(Box::new(left), Box::new(self.not()?));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Cond, String> {
        if self.keyword("NOT") {
            self.at += 1;
            return Ok(Cond::Not(Box::new(self.not()?)));
        }
        self.primary()
    }

    fn operand(&mut self) -> Result<Operand, String> {
        match self.next()? {
            Token::Word(w) if w.starts_with(':') => Ok(Operand::Value(self.names.value(&w)?)),
            Token::Word(w) => Ok(Operand::Path(self.names.attribute(&w)?)),
            other => Err(format!("expected an operand, got {other:?}")),
        }
    }

    fn path(&mut self) -> Result<String, String> {
        match self.operand()? {
            Operand::Path(p) => Ok(p),
            Operand::Value(v) => Err(format!("expected an attribute, got the value {v}")),
        }
    }

    fn primary(&mut self) -> Result<Cond, String> {
        if self.peek() == Some(&Token::Open) {
            self.at += 1;
            let inner = self.or()?;
            self.expect(Token::Close)?;
            return Ok(inner);
        }
        if let Some(Token::Word(w)) = self.peek().cloned()
            && self.tokens.get(self.at + 1) == Some(&Token::Open)
        {
            self.at += 2;
            let cond = match w.as_str() {
                "attribute_exists" => Cond::Exists(self.path()?),
                "attribute_not_exists" => Cond::NotExists(self.path()?),
                "begins_with" => {
                    let a = self.operand()?;
                    self.expect(Token::Comma)?;
                    Cond::BeginsWith(a, self.operand()?)
                }
                other => return Err(format!("the fake knows no function {other}")),
            };
            self.expect(Token::Close)?;
            return Ok(cond);
        }
        let left = self.operand()?;
        if self.keyword("BETWEEN") {
            self.at += 1;
            let lo = self.operand()?;
            if !self.keyword("AND") {
                return Err("BETWEEN without AND".into());
            }
            self.at += 1;
            return Ok(Cond::Between(left, lo, self.operand()?));
        }
        match self.next()? {
            Token::Compare(op) => Ok(Cond::Compare(left, op, self.operand()?)),
            other => Err(format!("expected a comparison, got {other:?}")),
        }
    }
}

/// Whether `condition` holds of `item` (`None`: no item).
pub fn holds(condition: &str, names: &Names, item: Option<&Item>) -> Result<bool, String> {
    let mut parser = Parser {
        tokens: tokens(condition)?,
        at: 0,
        names,
    };
    let cond = parser.or()?;
    if parser.at != parser.tokens.len() {
        return Err(format!("trailing tokens in {condition:?}"));
    }
    Ok(eval(&cond, item))
}

fn resolve(operand: &Operand, item: Option<&Item>) -> Option<Value> {
    match operand {
        Operand::Path(p) => item.and_then(|i| i.get(p)).cloned(),
        Operand::Value(v) => Some(v.clone()),
    }
}

fn eval(cond: &Cond, item: Option<&Item>) -> bool {
    match cond {
        Cond::And(a, b) => eval(a, item) && eval(b, item),
        Cond::Or(a, b) => eval(a, item) || eval(b, item),
        Cond::Not(a) => !eval(a, item),
        Cond::Exists(p) => item.is_some_and(|i| i.contains_key(p)),
        Cond::NotExists(p) => !item.is_some_and(|i| i.contains_key(p)),
        Cond::BeginsWith(a, b) => match (resolve(a, item), resolve(b, item)) {
            (Some(a), Some(b)) => match (typed(&a), typed(&b)) {
                (Some(Typed::B(a)), Some(Typed::B(b))) => a.starts_with(&b),
                (Some(Typed::S(a)), Some(Typed::S(b))) => a.starts_with(&b),
                _ => false,
            },
            _ => false,
        },
        Cond::Compare(a, op, b) => {
            let (Some(a), Some(b)) = (resolve(a, item), resolve(b, item)) else {
                return false;
            };
            match (*op, compare(&a, &b)) {
                ("<>", None) => true,
                (_, None) => false,
                ("=", Some(o)) => o == Ordering::Equal,
                ("<>", Some(o)) => o != Ordering::Equal,
                ("<", Some(o)) => o == Ordering::Less,
                ("<=", Some(o)) => o != Ordering::Greater,
                (">", Some(o)) => o == Ordering::Greater,
                (_, Some(o)) => o != Ordering::Less,
            }
        }
        Cond::Between(a, lo, hi) => {
            let (Some(a), Some(lo), Some(hi)) =
                (resolve(a, item), resolve(lo, item), resolve(hi, item))
            else {
                return false;
            };
            compare(&a, &lo).is_some_and(|o| o != Ordering::Less)
                && compare(&a, &hi).is_some_and(|o| o != Ordering::Greater)
        }
    }
}

#[derive(PartialEq, PartialOrd)]
enum Typed {
    N(i128),
    S(String),
    B(Vec<u8>),
    Bool(bool),
}

fn typed(v: &Value) -> Option<Typed> {
    let (kind, inner) = v.as_object()?.iter().next()?;
    Some(match kind.as_str() {
        "N" => Typed::N(inner.as_str()?.parse().ok()?),
        "S" => Typed::S(inner.as_str()?.to_owned()),
        "B" => Typed::B(BASE64.decode(inner.as_str()?).ok()?),
        "BOOL" => Typed::Bool(inner.as_bool()?),
        _ => return None,
    })
}

/// The order of two values of one type (`None` for two types, or a type without order).
pub fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (typed(a)?, typed(b)?) {
        (Typed::N(a), Typed::N(b)) => Some(a.cmp(&b)),
        (Typed::S(a), Typed::S(b)) => Some(a.cmp(&b)),
        (Typed::B(a), Typed::B(b)) => Some(a.cmp(&b)),
        (Typed::Bool(a), Typed::Bool(b)) if a == b => Some(Ordering::Equal),
        _ => None,
    }
}

/// The bytes of a binary value.
pub fn bytes_of(v: &Value) -> Option<Vec<u8>> {
    match typed(v)? {
        Typed::B(b) => Some(b),
        _ => None,
    }
}

/// Applies `update` (SET, REMOVE and ADD clauses) to `item`.
pub fn apply_update(update: &str, names: &Names, item: &mut Item) -> Result<(), String> {
    let mut parser = Parser {
        tokens: tokens(update)?,
        at: 0,
        names,
    };
    while parser.peek().is_some() {
        let clause = match parser.next()? {
            Token::Word(w) => w.to_ascii_uppercase(),
            other => return Err(format!("expected SET, REMOVE or ADD, got {other:?}")),
        };
        loop {
            let path = parser.path()?;
            match clause.as_str() {
                "SET" => {
                    parser.expect(Token::Compare("="))?;
                    match parser.operand()? {
                        Operand::Value(v) => {
                            item.insert(path, v);
                        }
                        Operand::Path(from) => {
                            let v = item
                                .get(&from)
                                .cloned()
                                .ok_or_else(|| format!("SET from missing attribute {from}"))?;
                            item.insert(path, v);
                        }
                    }
                }
                "REMOVE" => {
                    item.remove(&path);
                }
                "ADD" => {
                    let Operand::Value(v) = parser.operand()? else {
                        return Err("ADD takes a value".into());
                    };
                    let Some(Typed::N(add)) = typed(&v) else {
                        return Err("ADD of a non-number".into());
                    };
                    let now = match item.get(&path).map(typed) {
                        None => 0,
                        Some(Some(Typed::N(n))) => n,
                        Some(_) => return Err(format!("ADD to non-number {path}")),
                    };
                    item.insert(path, serde_json::json!({ "N": (now + add).to_string() }));
                }
                other => return Err(format!("the fake knows no clause {other}")),
            }
            if parser.peek() == Some(&Token::Comma) {
                parser.at += 1;
            } else {
                break;
            }
        }
    }
    Ok(())
}
