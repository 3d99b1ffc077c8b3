//! `metrics`: the delivery metrics of an application (or of every one),
//! read from the event log and measured by [`crate::metrics::measure`].

use std::collections::BTreeMap;

use vergence_model::error::{Error, Result};
use vergence_model::{ApplicationName, EventFilter, ReleaseChannelName};

use super::Control;
use crate::metrics::{DeliveryMetrics, Lookback, Window, measure};

impl Control {
    /// The four delivery measures of `application` (`None`: every
    /// application of the config in force) over the `lookback` up to now.
    ///
    /// Reads every stored event of the application, not only the window's:
    /// a lead time or a restore that ends within the window may begin
    /// before it. The stores keep events for a bounded time (DynamoDB: 30
    /// days unless configured otherwise), which bounds the read too.
    pub async fn metrics(
        &self,
        application: Option<&ApplicationName>,
        lookback: Lookback,
    ) -> Result<DeliveryMetrics> {
        let current = self.store.current_config().await?.ok_or_else(|| {
            Error::not_found(
                "config (apply one first with `vergence up` or `vergence configs push`)",
            )
        })?;
        if let Some(application) = application
            && !current.channels.contains_key(application)
        {
            return Err(Error::not_found(format!("application {application}")));
        }
        // The channel each application deploys to last: the end of its
        // promotion order, as stored with the config pointer (reads never
        // compile).
        let last_channels: BTreeMap<ApplicationName, ReleaseChannelName> = current
            .channels
            .iter()
            .filter(|(app, _)| application.is_none_or(|a| a == *app))
            .filter_map(|(app, order)| Some((app.clone(), order.last()?.clone())))
            .collect();
        let until = self.clock.now();
        let since = until
            .checked_sub(lookback.duration())
            .map_err(|e| Error::invalid("since", format!("{lookback} before now: {e}")))?;
        let filter = EventFilter {
            application: application.cloned(),
            ..EventFilter::default()
        };
        let events = self.store.list_events(&filter).await?;
        let mut metrics = measure(&events, &last_channels, Window { since, until });
        metrics.application = application.cloned();
        Ok(metrics)
    }
}
