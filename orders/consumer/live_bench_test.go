package consumer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"flashgate/internal/kafkatest"
	"flashgate/orders/broker"
)

// liveRate is BenchmarkConsumerLiveCPU's events per second, fed every
// 10 ms.
const liveRate = 5000

// liveFeedEnv makes the test binary BenchmarkConsumerLiveCPU's feeder
// (TestMain): "FILE BROKER" — FILE's lines (key TAB value) to kcat at
// liveRate, 10 ms of them at a time.
const liveFeedEnv = "FLASHGATE_CONSUMER_LIVE_FEED"

// serveLiveFeed is the feeder process, when the environment says so: it
// runs kcat with FILE on its input at liveRate and exits.
func serveLiveFeed() {
	arg, ok := os.LookupEnv(liveFeedEnv)
	if !ok {
		return
	}
	file, addr, _ := strings.Cut(arg, " ")
	if err := liveFeed(file, addr); err != nil {
		fmt.Fprintln(os.Stderr, "live feed:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func liveFeed(file, addr string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	kcat := exec.Command("kcat", "-P", "-b", addr, "-t", testTopic, "-K", "\t", "-X", "linger.ms=1")
	kcat.Stderr = os.Stderr
	in, err := kcat.StdinPipe()
	if err != nil {
		return err
	}
	if err := kcat.Start(); err != nil {
		return err
	}
	const tick = 10 * time.Millisecond
	perTick := liveRate * int(tick) / int(time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for len(data) > 0 {
		n := 0
		for i := 0; i < perTick && n < len(data); i++ {
			j := bytes.IndexByte(data[n:], '\n')
			if j < 0 {
				n = len(data)
				break
			}
			n += j + 1
		}
		if _, err := in.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
		<-t.C
	}
	in.Close() // kcat sends its last lines at the end of its input
	return kcat.Wait()
}

// BenchmarkConsumerLiveCPU measures the consumer as `bench compare` sees
// it: the broker (kfake) in a process of its own and the events arriving
// while the consumer runs, at liveRate (kcat produces them, fed through a
// pipe every 10 ms by a child process), so the batches are what a steady
// stream makes, not a backlog's. The process's CPU per order (getrusage of
// this process only: the broker, the feeder and kcat are children, Redis
// and ClickHouse servers of their own) is then the consumer's alone: its
// client, decode, store, mark, commit. (Until the feeder moved out, its
// pipe writes and wake-ups were ~15 % of the figure, in the notes below.)
// Each store with both clients fetching as the consumer does (newKafkaGoSource:
// waiting for 64 KiB or the batch time) and with fetches that return as
// soon as anything is written (at-once: 1 byte, 250 ms, the consumer's
// until issue 26 item 3); the batch time grows as the edge's does
// (orders.batch_time_max). It needs kcat and -benchtime Nx; -test.cpu 1
// runs the consumer at GOMAXPROCS=1, as bench compare does.
//
//	go test -c -o /tmp/consumer.test ./orders/consumer/ && cd orders/consumer &&
//	for i in 1 2 3; do /tmp/consumer.test -test.run '^$' -test.bench ConsumerLiveCPU/nop -test.benchtime 20000x -test.cpu 1; done
//
// Measured with the feeder in a child process (2026-12-04, load average
// 2-6), nop store, µs per order, rounds: kafka-go 11.9 10.5 9.4 and
// 8.9 8.8 7.4 7.7; kafka-go-at-once 15.4 12.0 10.0 and 11.6 10.8 11.6
// 11.5 (waiting / at once 0.64-0.95, median 0.78); kgo 6.0 5.7 5.1 and
// 6.9 4.9 5.1 4.8 (0.51-0.77 of kafka-go); kgo-at-once 17.4 14.7 13.2.
// The file store adds 2-4 µs, ClickHouse's client 1-2 (bench/README,
// finding 13).
//
// The notes of the earlier setup (the feeder in this process, fetches at
// once the consumer's, "min64k" the waiting ones):
//
// Measured here, 3 alternating runs of 20,000 orders at 5,000/s (~480
// orders per batch in every case), the 2 cores shared with five other jobs
// (load average 13-16, which inflates every figure): CPU per order,
// median (rounds), and the median of the rounds' ratios to kafka-go's:
//
//	nop  kafka-go         20.9 µs (18.5-23.9)
//	nop  kgo              30.9 µs (29.5-38.7)  1.48
//	nop  kafka-go-min64k  19.5 µs (19.0-20.0)  0.93
//	nop  kgo-min64k       14.1 µs (13.0-14.6)  0.62
//
// (An earlier run of kafka-go and kgo alone: 28.2 and 38.3 µs, 1.36; the
// file store adds the same to each: 33.0 and 43.0 µs in one run.) The
// cost is fetch round trips (each a write and a read on loopback, and the
// wake-ups): at 1 byte nearly every write of the producer is a fetch (kgo:
// 1,130-1,340 fetches for 20,000 orders; 64 KiB and 250 ms: 52-55,
// counted with a hook in one run each). kafka-go fetches each partition on
// a connection of its own, kgo all of a broker's partitions in one
// request, so only kgo gains much from waiting fetches. (Then the
// consumer kept kafka-go at 1 byte for the first event of a quiet sale;
// since fetch counts the broker's wait in the batch time, waiting fetches
// store it sooner: BenchmarkQuietLatency.)

// liveClients are the Kafka clients and fetch settings the live and idle
// benchmarks compare.
var liveClients = []struct {
	name   string
	source func(*Consumer) (source, error)
}{
	// The consumer's: fetches wait for waitBytes or the batch time
	// (newKafkaGoSource), and kgo's fetching alike.
	{"kafka-go", newKafkaGoSource},
	{"kgo", newKgoSource},
	// Fetches that return as soon as anything is written: the consumer's
	// until issue 26 item 3.
	{"kafka-go-at-once", atOnce(newKafkaGoSourceFetch)},
	{"kgo-at-once", atOnce(newKgoSourceFetch)},
}

func BenchmarkConsumerLiveCPU(b *testing.B) {
	if _, err := exec.LookPath("kcat"); err != nil {
		b.Skip("needs kcat")
	}
	for _, store := range []string{"nop", "file", "clickhouse"} {
		for _, client := range liveClients {
			b.Run(store+"/"+client.name, func(b *testing.B) { benchConsumerLiveCPU(b, store, client.source) })
		}
	}
}

// atOnce is a source whose fetches return as soon as anything is written
// (1 byte, at most 250 ms).
func atOnce[N int | int32](fetch func(*Consumer, N, time.Duration) (source, error)) func(*Consumer) (source, error) {
	return func(c *Consumer) (source, error) { return fetch(c, 1, 250*time.Millisecond) }
}

func benchConsumerLiveCPU(b *testing.B, store string, newSource func(*Consumer) (source, error)) {
	if b.N < 2*ordersConf.BatchSize {
		return // the testing package's probe run
	}
	kp := kafkatest.StartProcess(b)
	brokers := []string{kp.Addr()}
	ctx := context.Background()
	if err := broker.EnsureTopics(ctx, brokers, broker.Security{}, broker.Topics(testTopic, kafkaConf.DLQTopic, 4)...); err != nil {
		b.Fatal(err)
	}
	st := openStock(b)
	s := benchStore(b, store)
	// The events as kcat's input lines: key TAB value.
	var lines [][]byte
	for p := range 8 {
		n := b.N / 8
		if p < b.N%8 {
			n++
		}
		for _, ev := range benchEvents(n, fmt.Sprintf("live%d", p)) {
			v, err := ev.Encode()
			if err != nil {
				b.Fatal(err)
			}
			lines = append(lines, append(append(append(ev.Key(), '\t'), v...), '\n'))
		}
	}
	// Interleave the products, as concurrent purchases arrive.
	mixed := make([][]byte, 0, len(lines))
	per := (len(lines) + 7) / 8
	for i := range per {
		for p := 0; p < 8; p++ {
			if j := p*per + i; j < len(lines) && (p+1)*per > j {
				mixed = append(mixed, lines[j])
			}
		}
	}
	feed := filepath.Join(b.TempDir(), "feed")
	if err := os.WriteFile(feed, bytes.Join(mixed, nil), 0o600); err != nil {
		b.Fatal(err)
	}

	var (
		mu              sync.Mutex
		stored, skipped int
		cpu0            time.Duration
		wall0           time.Time
		batches         int
	)
	done := make(chan struct{})
	b.ResetTimer()
	c := start(b, Config{Brokers: brokers, Store: s, Stock: st, newSource: newSource, BatchTimeMax: ordersConf.BatchTimeMax,
		OnStored: func(m map[string][]int64) {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, ids := range m {
				n += len(ids)
			}
			if stored == 0 {
				skipped = n
				cpu0, wall0 = processCPU(b), time.Now()
			} else {
				batches++
			}
			stored += n
			if stored == len(mixed) {
				close(done)
			}
		}})
	// The feeder and kcat are child processes: their CPU is not the
	// consumer's (in this process they were ~15 % of it).
	feeder := exec.Command(os.Args[0], "-test.run=^$")
	feeder.Env = append(os.Environ(), liveFeedEnv+"="+feed+" "+brokers[0])
	feeder.Stderr = os.Stderr
	if err := feeder.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { feeder.Process.Kill(); feeder.Wait() })
	select {
	case <-done:
	case <-time.After(time.Minute):
		mu.Lock()
		defer mu.Unlock()
		b.Fatalf("%d of %d stored in a minute (%+v)", stored, len(mixed), c.Stats())
	}
	cpu, wall := processCPU(b)-cpu0, time.Since(wall0)
	b.StopTimer()
	n := float64(len(mixed) - skipped)
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/order")
	b.ReportMetric(float64(wall.Nanoseconds())/n, "wall-ns/order")
	b.ReportMetric(n/float64(batches), "orders/batch")
}

// BenchmarkConsumerIdleCPU is what the consumer costs with nothing to
// consume: the broker (kfake) in its own process, a joined consumer (a
// first order stored), then 5 s without events; it reports this process's
// CPU per second of them (fetches that come back empty, heartbeats, the
// stall watch). Per order of a stream this is cost/rate: 1 ms/s is 0.2 µs
// an order at 5,000 orders/s. b.N is ignored (-benchtime 1x).
func BenchmarkConsumerIdleCPU(b *testing.B) {
	for _, client := range liveClients {
		b.Run(client.name, func(b *testing.B) { benchConsumerIdleCPU(b, client.source) })
	}
}

func benchConsumerIdleCPU(b *testing.B, newSource func(*Consumer) (source, error)) {
	kp := kafkatest.StartProcess(b)
	brokers := []string{kp.Addr()}
	if err := broker.EnsureTopics(context.Background(), brokers, broker.Security{}, broker.Topics(testTopic, kafkaConf.DLQTopic, 4)...); err != nil {
		b.Fatal(err)
	}
	stored := make(chan struct{}, 1)
	start(b, Config{Brokers: brokers, Store: discardStore{}, Stock: openStock(b), newSource: newSource,
		OnStored: func(map[string][]int64) {
			select {
			case stored <- struct{}{}:
			default:
			}
		}})
	w := newWriter(brokers, testTopic)
	publish(b, w, benchEvents(1, "idle"))
	w.Close()
	select {
	case <-stored:
	case <-time.After(30 * time.Second):
		b.Fatal("not stored in 30 s")
	}
	const idle = 5 * time.Second
	b.ResetTimer()
	cpu0 := processCPU(b)
	time.Sleep(idle) // the measurement: nothing to wait for
	cpu := processCPU(b) - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/1000/idle.Seconds(), "cpu-ms/s")
}
