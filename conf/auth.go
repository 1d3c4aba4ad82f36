package conf

import (
	"time"

	"flashgate/conf/field"
)

// AuthConfig is the `auth:` section: the signed shopper session.
type AuthConfig struct {
	// Secrets sign (the first) and verify (all) session JWTs; at least 32
	// bytes each; "env:NAME" reads one from the environment. Empty: a random
	// secret per process (demo: sessions end on restart and are not valid on
	// other edges).
	Secrets    []string      `yaml:"secrets" secret:"true"`
	SessionTTL time.Duration `yaml:"session_ttl"`
	// DemoLogin turns on POST /api/login, which signs anyone in as the
	// user id they name: the zero-setup demo. Validation refuses it when
	// Redis, Kafka or ClickHouse are real servers unless DemoLoginForce
	// says so (a test rig on real servers): see demo.go.
	DemoLogin      bool `yaml:"demo_login"`
	DemoLoginForce bool `yaml:"demo_login_force"`
	CookieSecure   bool `yaml:"cookie_secure"`
}

// fill gives the settings left out or written as zero their defaults.
func (c *AuthConfig) fill() {
	orDefault(&c.SessionTTL, 24*time.Hour)
}

// Validate checks the section; paths are relative to `auth`.
func (c *AuthConfig) Validate() field.Errors {
	var errs field.Errors
	for i, s := range c.Secrets {
		if _, err := secret(s); err != nil {
			errs.Add(field.Index("secrets", i), "%v", err)
		}
	}
	if c.SessionTTL < time.Minute || c.SessionTTL > 30*24*time.Hour {
		errs.Add("session_ttl", "must be between 1m and 720h, got %v", c.SessionTTL)
	}
	return errs
}

// SessionSecrets resolves the secrets, or one random secret when none is
// configured (random reports that, so the caller can warn).
func (c *AuthConfig) SessionSecrets() (secrets [][]byte, random bool, err error) {
	for _, s := range c.Secrets {
		b, err := secret(s)
		if err != nil {
			return nil, false, err
		}
		secrets = append(secrets, b)
	}
	if len(secrets) == 0 {
		return [][]byte{randomSecret()}, true, nil
	}
	return secrets, false, nil
}
