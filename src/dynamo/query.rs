//! Query and Scan, one page at a time or walking every page.

use futures::{Stream, TryStreamExt, stream};
use serde::{Deserialize, Serialize};

use super::attr::Item;
use super::client::{Deadline, DynamoClient};
use super::error::DynamoError;
use super::item::{ExpressionAttributes, expression_placeholders};

/// A Query request.
///
/// ```
/// use dynacommit::dynamo::Query;
///
/// let q = Query::new("leases", "#pk = :p")
///     .name("#pk", "path")
///     .value(":p", "data/log")
///     .limit(100);
/// # let _ = q;
/// ```
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Query {
    /// The table.
    pub table_name: String,
    /// A secondary index to query instead of the table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_name: Option<String>,
    /// Which items: the hash key's value, optionally a range key condition.
    pub key_condition_expression: String,
    /// Items to drop after reading (they still count against `limit` and capacity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_expression: Option<String>,
    /// The attributes to return, if not all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projection_expression: Option<String>,
    /// Placeholders of every expression.
    #[serde(flatten)]
    pub expressions: ExpressionAttributes,
    /// Strongly consistent reads (default `true`).
    pub consistent_read: bool,
    /// Items evaluated per page at most (DynamoDB also stops a page at 1 MB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Ascending range key order (default `true`).
    pub scan_index_forward: bool,
    /// Where the previous page stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclusive_start_key: Option<Item>,
}

impl Query {
    /// A consistent, ascending query of `table` for `key_condition`.
    pub fn new(table: impl Into<String>, key_condition: impl Into<String>) -> Self {
        Self {
            table_name: table.into(),
            index_name: None,
            key_condition_expression: key_condition.into(),
            filter_expression: None,
            projection_expression: None,
            expressions: ExpressionAttributes::default(),
            consistent_read: true,
            limit: None,
            scan_index_forward: true,
            exclusive_start_key: None,
        }
    }

    /// Items per page at most.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Descending range key order.
    pub fn descending(mut self) -> Self {
        self.scan_index_forward = false;
        self
    }

    /// Eventually consistent reads.
    pub fn eventually_consistent(mut self) -> Self {
        self.consistent_read = false;
        self
    }

    /// Drops items that fail `expression` from the answer.
    pub fn filter(mut self, expression: impl Into<String>) -> Self {
        self.filter_expression = Some(expression.into());
        self
    }

    /// Only these attributes.
    pub fn projection(mut self, expression: impl Into<String>) -> Self {
        self.projection_expression = Some(expression.into());
        self
    }

    /// Queries a secondary index.
    pub fn index(mut self, name: impl Into<String>) -> Self {
        self.index_name = Some(name.into());
        self
    }

    /// Starts after this key (the previous page's `last_evaluated_key`).
    pub fn start_after(mut self, key: Item) -> Self {
        self.exclusive_start_key = Some(key);
        self
    }
}

expression_placeholders!(Query);

/// A Scan request: every item of a table, optionally filtered. Reads the whole table;
/// for inspection tools, not for hot paths.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Scan {
    /// The table.
    pub table_name: String,
    /// Items to drop after reading (they still count against `limit` and capacity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_expression: Option<String>,
    /// Placeholders of the filter.
    #[serde(flatten)]
    pub expressions: ExpressionAttributes,
    /// Strongly consistent reads (default `true`).
    pub consistent_read: bool,
    /// Items evaluated per page at most (DynamoDB also stops a page at 1 MB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Where the previous page stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclusive_start_key: Option<Item>,
}

impl Scan {
    /// A consistent scan of all of `table`.
    pub fn new(table: impl Into<String>) -> Self {
        Self {
            table_name: table.into(),
            filter_expression: None,
            expressions: ExpressionAttributes::default(),
            consistent_read: true,
            limit: None,
            exclusive_start_key: None,
        }
    }

    /// Drops items that fail `expression` from the answer.
    pub fn filter(mut self, expression: impl Into<String>) -> Self {
        self.filter_expression = Some(expression.into());
        self
    }

    /// Items per page at most.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }
}

expression_placeholders!(Scan);

/// A request answered in pages.
trait Paged: Serialize + Send + Sync + 'static {
    /// The operation's name.
    const OPERATION: &'static str;
    /// Continues after `key`.
    fn continue_after(&mut self, key: Item);
}

impl Paged for Query {
    const OPERATION: &'static str = "Query";
    fn continue_after(&mut self, key: Item) {
        self.exclusive_start_key = Some(key);
    }
}

impl Paged for Scan {
    const OPERATION: &'static str = "Scan";
    fn continue_after(&mut self, key: Item) {
        self.exclusive_start_key = Some(key);
    }
}

/// One page of a Query's or Scan's answer.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Page {
    /// The items of this page.
    pub items: Vec<Item>,
    /// Where to continue; `None` on the last page.
    pub last_evaluated_key: Option<Item>,
}

impl DynamoClient {
    /// One Query call: a page of at most `limit` items and 1 MB.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn query(&self, request: &Query) -> Result<Page, DynamoError> {
        self.call("Query", request).await
    }

    /// Every page of a query, in order, each fetched when the previous one is consumed.
    /// Each page is a call of its own, with a deadline of its own (the consumer decides how
    /// long the walk takes); [`query_all`](Self::query_all) has one for all pages.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) fn query_pages(
        &self,
        request: Query,
    ) -> impl Stream<Item = Result<Page, DynamoError>> + '_ {
        self.pages(request, None)
    }

    /// Every page of a scan, in order, each fetched when the previous one is consumed, each
    /// within a deadline of its own: stop reading to stop scanning.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) fn scan_pages(
        &self,
        request: Scan,
    ) -> impl Stream<Item = Result<Page, DynamoError>> + '_ {
        self.pages(request, None)
    }

    /// Every item of a query, walking all pages, all within one
    /// [`call_deadline`](super::RetryConfig::call_deadline) (past it:
    /// [`DynamoError::DeadlineExceeded`] naming `query_all`).
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn query_all(&self, request: Query) -> Result<Vec<Item>, DynamoError> {
        let deadline = self.deadline("query_all");
        Self::all_items(self.pages(request, Some(deadline))).await
    }

    /// Every item a scan finds, walking all pages, all within one
    /// [`call_deadline`](super::RetryConfig::call_deadline) (past it:
    /// [`DynamoError::DeadlineExceeded`] naming `scan_all`).
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn scan_all(&self, request: Scan) -> Result<Vec<Item>, DynamoError> {
        let deadline = self.deadline("scan_all");
        Self::all_items(self.pages(request, Some(deadline))).await
    }

    /// The pages of `request`, all by `deadline` if given, else each within its own.
    fn pages<R: Paged>(
        &self,
        request: R,
        deadline: Option<Deadline>,
    ) -> impl Stream<Item = Result<Page, DynamoError>> + '_ {
        stream::try_unfold(Some(request), move |next| async move {
            let Some(mut request) = next else {
                return Ok(None);
            };
            let deadline = deadline.unwrap_or_else(|| self.deadline(R::OPERATION));
            let page: Page = self.call_by(R::OPERATION, &request, &deadline).await?;
            let following = page.last_evaluated_key.clone().map(|key| {
                request.continue_after(key);
                request
            });
            Ok(Some((page, following)))
        })
    }

    async fn all_items(
        pages: impl Stream<Item = Result<Page, DynamoError>>,
    ) -> Result<Vec<Item>, DynamoError> {
        pages
            .map_ok(|page| stream::iter(page.items.into_iter().map(Ok)))
            .try_flatten()
            .try_collect()
            .await
    }
}
