package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"flashgate/conf"
)

// groupTrace records the consumer group requests the kfake coordinator
// receives (JoinGroup, SyncGroup, Heartbeat, LeaveGroup: who, when, which
// generation), for a test to print when the group did not re-form. The
// coordinator answers nothing about a request it parks or drops, so the
// answers are the consumers' side: their debug log says what they got.
type groupTrace struct {
	mu    sync.Mutex
	start time.Time
	lines []string
}

// groupTraceMax bounds the trace: three members heartbeating every second
// make ~180 lines a minute.
const groupTraceMax = 600

// traceGroup starts recording env's group requests; observing only, the
// coordinator handles every request as before.
func (env *ordEnv) traceGroup() *groupTrace {
	gt := &groupTrace{start: time.Now()}
	for _, key := range []int16{kmsg.JoinGroup.Int16(), kmsg.SyncGroup.Int16(), kmsg.Heartbeat.Int16(), kmsg.LeaveGroup.Int16()} {
		env.kafka.ControlKey(key, func(req kmsg.Request) (kmsg.Response, error, bool) {
			gt.add(req)
			return nil, nil, false
		})
	}
	return gt
}

// shortMember is the tail of a member id (kfake's are client id + UUID).
func shortMember(id string) string {
	if id == "" {
		return `""`
	}
	return id[max(0, len(id)-8):]
}

func (gt *groupTrace) add(req kmsg.Request) {
	var line string
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		line = fmt.Sprintf("JoinGroup v%d member=%s session=%dms rebalance=%dms", r.Version, shortMember(r.MemberID),
			r.SessionTimeoutMillis, r.RebalanceTimeoutMillis)
	case *kmsg.SyncGroupRequest:
		line = fmt.Sprintf("SyncGroup member=%s gen=%d assignments=%d", shortMember(r.MemberID), r.Generation, len(r.GroupAssignment))
	case *kmsg.HeartbeatRequest:
		line = fmt.Sprintf("Heartbeat member=%s gen=%d", shortMember(r.MemberID), r.Generation)
	case *kmsg.LeaveGroupRequest:
		ids := []string{}
		if r.MemberID != "" {
			ids = append(ids, shortMember(r.MemberID))
		}
		for _, m := range r.Members {
			ids = append(ids, shortMember(m.MemberID))
		}
		line = fmt.Sprintf("LeaveGroup members=%v", ids)
	default:
		return
	}
	gt.mu.Lock()
	defer gt.mu.Unlock()
	gt.lines = append(gt.lines, fmt.Sprintf("%8.3fs %s", time.Since(gt.start).Seconds(), line))
	if len(gt.lines) > groupTraceMax {
		gt.lines = gt.lines[len(gt.lines)-groupTraceMax:]
	}
}

func (gt *groupTrace) String() string {
	gt.mu.Lock()
	defer gt.mu.Unlock()
	return strings.Join(gt.lines, "\n")
}

// groupReport is the orders consumer group as the broker sees it now: its
// state and members (with their partitions), and per partition the log
// start, end and committed offsets and the lag. Errors are part of the
// report: it is written when something already went wrong.
func (env *ordEnv) groupReport() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	group, topic := conf.Defaults().Orders.Group, conf.Defaults().Kafka.Topic
	cl := &kafka.Client{Addr: kafka.TCP(env.brokers...), Timeout: 10 * time.Second}
	var b strings.Builder
	dg, err := cl.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	switch {
	case err != nil:
		fmt.Fprintf(&b, "describe group %s: %v\n", group, err)
	case len(dg.Groups) != 1:
		fmt.Fprintf(&b, "describe group %s: %d groups\n", group, len(dg.Groups))
	default:
		g := dg.Groups[0]
		fmt.Fprintf(&b, "group %s: state %s, %d members (err %v)\n", group, g.GroupState, len(g.Members), g.Error)
		for _, m := range g.Members {
			fmt.Fprintf(&b, "  member %s host %s partitions %v\n", shortMember(m.MemberID), m.ClientHost, m.MemberAssignments.Topics)
		}
	}
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 {
		fmt.Fprintf(&b, "metadata %s: %v\n", topic, err)
		return b.String()
	}
	var parts []int
	var reqs []kafka.OffsetRequest
	for _, p := range md.Topics[0].Partitions {
		parts = append(parts, p.ID)
		reqs = append(reqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
	}
	slices.Sort(parts)
	offs, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		fmt.Fprintf(&b, "list offsets: %v\n", err)
		return b.String()
	}
	committed := map[int]int64{}
	if of, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}}); err != nil {
		fmt.Fprintf(&b, "offset fetch: %v\n", err)
	} else {
		for _, p := range of.Topics[topic] {
			committed[p.Partition] = p.CommittedOffset
		}
	}
	for _, p := range offs.Topics[topic] {
		c, ok := committed[p.Partition]
		lag := "?"
		if ok {
			lag = fmt.Sprint(p.LastOffset - max(c, p.FirstOffset))
		}
		fmt.Fprintf(&b, "  partition %d: start %d end %d committed %d lag %s\n", p.Partition, p.FirstOffset, p.LastOffset, c, lag)
	}
	return b.String()
}
