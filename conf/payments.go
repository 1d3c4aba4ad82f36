package conf

import (
	"time"

	"flashgate/conf/field"
)

// PaymentsConfig is the `payments:` section: how the payment system tells
// the edge that an order was paid, besides POST /admin/orders/paid.
type PaymentsConfig struct {
	// WebhookSecret signs the payment provider's calls of
	// POST /api/payments/webhook (HMAC-SHA256; >= 32 bytes, "env:NAME"
	// allowed). Empty: the webhook is off (404).
	WebhookSecret string `yaml:"webhook_secret" secret:"true"`
	// WebhookTolerance is how far a call's timestamp may be from the
	// edge's clock; its event ids are remembered (replays refused) for
	// twice as long.
	WebhookTolerance time.Duration `yaml:"webhook_tolerance"`
}

// fill gives the settings left out or written as zero their defaults.
func (p *PaymentsConfig) fill() {
	orDefault(&p.WebhookTolerance, 5*time.Minute)
}

// WebhookSecretBytes resolves the webhook secret; nil when the webhook is
// off.
func (p *PaymentsConfig) WebhookSecretBytes() ([]byte, error) {
	return secret(p.WebhookSecret)
}

// Validate checks the section; paths are relative to `payments`.
func (p *PaymentsConfig) Validate() field.Errors {
	var errs field.Errors
	if _, err := p.WebhookSecretBytes(); err != nil {
		errs.Add("webhook_secret", "%v", err)
	}
	if p.WebhookTolerance < time.Second || p.WebhookTolerance > time.Hour {
		errs.Add("webhook_tolerance", "must be between 1s and 1h, got %v", p.WebhookTolerance)
	}
	return errs
}
