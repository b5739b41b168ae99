//! Logins: the database names a pipeline, the user is `eddy`, and when the
//! server has an API key the client gives it as a cleartext password (the
//! same key as the REST API's bearer token). A failed login is a `FATAL`
//! error response with its SQLSTATE (`3D000` unknown pipeline, `28000`
//! unknown user, `28P01` wrong password), and the connection closes.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
    DefaultServerParameterProvider, StartupHandler,
};
use pgwire::api::{ClientInfo, PgWireConnectionState, METADATA_DATABASE, METADATA_USER};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::startup::Authentication;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use super::error::{code, fatal};
use crate::manager::Manager;

/// The only user.
pub const USER: &str = "eddy";

/// Checks logins.
pub struct Login {
    manager: Arc<Manager>,
    api_key: Option<String>,
    parameters: DefaultServerParameterProvider,
}

impl Login {
    /// Logins to the pipelines of `manager`, with `api_key` as password.
    pub fn new(manager: Arc<Manager>, api_key: Option<String>) -> Self {
        let mut parameters = DefaultServerParameterProvider::default();
        parameters.server_version = "16.6 (Eddy)".to_string();
        parameters.date_style = "ISO, MDY".to_string();
        parameters.time_zone = "UTC".to_string();
        Self {
            manager,
            api_key,
            parameters,
        }
    }
}

/// Compares in time independent of where the strings differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[async_trait]
impl StartupHandler for Login {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                let user = client
                    .metadata()
                    .get(METADATA_USER)
                    .cloned()
                    .unwrap_or_default();
                let database = client
                    .metadata()
                    .get(METADATA_DATABASE)
                    .cloned()
                    .unwrap_or_else(|| user.clone());
                if user != USER {
                    return Err(fatal(
                        "28000",
                        format!("role \"{user}\" does not exist: connect as user \"{USER}\""),
                    ));
                }
                if self.manager.relations(&database).is_err() {
                    return Err(fatal(
                        code::UNKNOWN_DATABASE,
                        format!("database \"{database}\" does not exist: the database is the name of a pipeline"),
                    ));
                }
                client
                    .metadata_mut()
                    .insert(METADATA_DATABASE.to_string(), database);
                if self.api_key.is_some() {
                    client.set_state(PgWireConnectionState::AuthenticationInProgress);
                    client
                        .send(PgWireBackendMessage::Authentication(
                            Authentication::CleartextPassword,
                        ))
                        .await?;
                    Ok(())
                } else {
                    finish_authentication(client, &self.parameters).await
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                let Some(key) = &self.api_key else {
                    return Err(fatal("08P01", "no password was asked for"));
                };
                let given = message.into_password()?;
                if same(given.password.as_bytes(), key.as_bytes()) {
                    finish_authentication(client, &self.parameters).await
                } else {
                    Err(fatal(
                        code::INVALID_PASSWORD,
                        format!("password authentication failed for user \"{USER}\": the password is the server's API key"),
                    ))
                }
            }
            _ => Ok(()),
        }
    }
}
