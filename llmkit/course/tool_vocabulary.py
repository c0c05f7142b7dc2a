"""The real words a skill conversation's made-up tools are named with: 3,000 words of the corpus.

With a few dozen words to name tools from, a model learns which words start a tool name and
writes one from memory: on held-out tools named with other real words (``quarry_capacity``) it
wrote ``no_q`` or a training verb. Drawn from thousands of words, split by the same hash as the
values (``values.value_split``), a held-out tool's words are the same kind of word as a training
tool's, only never seen in a name, so reading the name off the tool line is the only way to be
right on both sides. ``toolgen`` takes its split halves, minus its own word pools.

``WORDS`` is ``corpus_words`` of ``data/corpus/train.txt``: its most frequent lower-case words of
4-10 letters (Shakespeare's, so ``knave_sorrow`` is a fine tool name). Print it again with
``python -m llmkit.course.tool_vocabulary``; a test checks that the two agree.
"""
from __future__ import annotations

import re
import sys
from collections import Counter

WORD_COUNT = 3000
WORD_PATTERN = re.compile(r"\b[a-z]{4,10}\b")


def corpus_words(text: str, n: int = WORD_COUNT) -> list[str]:
    """The ``n`` most frequent lower-case words of 4-10 letters in ``text``, most frequent first
    (ties in alphabetical order, so the list is a pure function of the text)."""
    counts = Counter(WORD_PATTERN.findall(text))
    return [word for word, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]]


WORDS = """
that with your this have thou will thee shall what from good more love would lord they their them here well
know like hath come there then make than which upon were should must such when some these mine heart father
give time speak take think much king most tell never night doth death life hand great hear very made again
true eyes fair cannot where away other been sweet blood world look honour name done down fear before call
leave thus ever comes lady poor could being pray better noble heaven brother into nothing both myself many
still head bear hast house live master find little word part every dead those might stand wife soul friends
grace place friend against face gone himself first thine daughter keep long best show none tongue till words
dear though full woman young therefore mother enter answer whose else said thought bring hold peace mind stay
once fool thing queen forth another unto about dost hope morrow indeed matter gentle whom after rest back
within even cause heard nature makes right power three home thousand madam please shame truth hands lords
sword faith husband same state earth turn news play fellow hour meet things hence gentleman gods enough fall
came crown tears mean does follow since fortune false shalt hither light without rather reason yourself fire
kill prince wrong help honest thank welcome kind mistress youth only body fight seen lost sure duke last means
beauty thoughts arms spirit high near sleep wish child court present sent wilt itself strange through left
break foul pardon swear together yours prove lies says breath letter gold business cousin desire grief half
alone return told horse seem care send villain looks talk bloody devil pity land seek beseech people under
service sorrow times days found lose gave less purpose worth over knows between company each further sight
strong thyself born kiss late work charge cold proud believe general wear loves maid dare side marry royal
uncle happy wind worthy virtue lives need others years foot majesty pleasure read holy remember serve while
gracious sister brought given warrant money praise known music sake sound country free knave bound goes hate
hearts black comfort draw fault heavy hell mercy farewell grave weep certain pass hard mark doubt haste rich
ears merry field themselves women hang ring sick wise ground course deep self trust next water canst enemy
gentlemen knew patience save something sovereign white command deed neither oath touch voice change open sons
common drink straight twenty worse base coming hours brave justice question valiant didst person duty soon
door soldier suit took note tender flesh mouth past report want bold content fast withal needs presently spoke
ythee point stands watch lips married almost chamber grow liege pale sworn behold morning servant city favour
knight traitor walk already become counsel gives just wars yield glad lordship loss ready speaks appear having
moon speech whole above confess letters rage revenge sense sing dream slave room soldiers bosom hair office
thanks fell wonder either four lead deeds deliver heavens often pluck pretty sport strength strike vile
highness spirits deny learn town five murder wouldst action children kings speed behind truly beat living
loving pride marriage souls conscience offer passion case fortunes honourable hundred scorn tale lack plain
along form issue mighty parts slain attend bears heir seems worst battle fashion hide lion longer force
ourselves presence bless enemies excellent feel jest mock short weak book laugh mortal offence subject takes
twas witness worship curse entreat heads least shows write awhile labour promise respect begin fools teach
banish breast dangerous feast grant ladies cast chance fetch going kingdom paper quick second understand
virtuous danger kept noise suffer troth writ choose close foolish guard humour title year beard cross died
golden brain faults harm piece toward wisdom forward palace prayers princes thence angry anon colour dinner
fresh gates green hurt order quickly seal went wild birth match plague quarrel quoth shake taken tent valour
burn health move shape treason glory herself patient stop captain consent fill perceive poison throw twere
view fearful fine greater masters purse stood wherefore anything calls forget forgot judgment pains pure soft
broke carry dull gainst several because blow honesty judge measure opinion small drawn laid summer vain blame
cheeks ours sorry wert borne coward feed folly manner methinks prison wounds aside fears glass held nurse
steal tear wine blind brief bright cheek cheer dark fled knowledge monster obey prisoner receive thither brow
creature double proof rogue taste weary wits army bitter drum march stir blessed drown motion quiet round
walls alive aught beggar clock emperor hadst join powers stars sudden tongues trumpet bond drop excuse goodly
princely shadow steel wealth ancient blows choice greatness guilty lend struck trouble wrongs clear cruel
desires fame gain grows holds lest neck rise silver stain swift ways bones boys catch count cunning hearing
leaves pain precious quite secret sharp thief whence wherein wretched yourselves affection argument beast
effect endure forbid heels humble liberty meat melancholy occasion rough safety spent terms third throne wash
advantage commend keeps manners private remain scarce simple street wound defend dies drunk fellows legs
request rose rude safe seven thrice among doing fare foes gate large lust nose perform shouldst sirrah spring
whether widow winter anger broken delight evil flowers gift heat host idle shepherd smile sort spend unless
wall courtesy dance dreadful fail fiend finger fury honours loud malice monstrous swords bearing camp chain
depart jewel knee lover oaths reasons seat shore silence song subjects twice vows affairs called damned grown
mayst sometime supper table thinks wast wicked adieu awake brothers claim clouds fain follows forsworn fought
lawful post priest ship tree tune weeping approach bestow cried desperate easy flower fond food former madness
meeting spite stone story thunder wench wood bare church deserve falls kneel knock leisure offend ones proper
stones study treasure wanton whilst breathe dearest doors heavenly hopes knife niece sack sighs slow trial
ease embrace encounter loved mere messenger number quality rascal skill slaughter wait wide yonder always
bastard blush bred discourse feet horses instant paid painted possess possible remedy sheep stuff towards
whereof womb abroad absence asleep burning charity colours courage crowns damn dishonour fancy flies forgive
gallant griefs meaning nine outward public sometimes sooner spoken vice able alas betray bids buried dust
faces flatter goodness happiness kindness lovers making natural neighbour officer pleas rank ransom sigh
thrive train wretch appears cries daughters flood gown gross humbly memory mirth plot pound rain reign single
storm teeth undone voices wings begins bought condition cure deadly deal disgrace doom drops entertain friar
girl greatest lovely mend minds particular reverend seeming shut spare twixt angel attending bark becomes
below citizens credit enjoy envy estate fish flight hark heed hollow knees list meant perfect rare sickness
streets suddenly trick tyrant warlike woes wrath abuse authority ducats following freely guess honey image
innocent intend learned names prepare proclaim protest realm repent saying stranger tidings turns visit demand
denied despair dread intent jealous merit ride sign smell traitors triumph vengeance virtues wake weigh winds
wives device durst dying maiden maintain party picture protector ruin sail salt season slander therein breed
chide commission constant contrary desert empress equal execution express hers line main modesty reputation
retire sits tomb victory window wont account armour beaten custom ends fiery frame frown gifts glorious
ignorant lands limbs loose naked proceed render sacred shallow shed shot sorrows tedious throat thrust
trumpets undertake attended besides bird challenge consider despite divine early employ hill policy satisfied
seas star stomach taught tide whither advice ambition babe burden civil crave dares degree dumb empty fairest
followers greet kinsman regard root rule servants success waste assure bade banished bawd bend complexion
devise dreams earnest forest friendship garments graces hereafter iron lean liest obedience pair plead ripe
search sees shine shortly sides sleeping smiles sore sounds spake swore tempest twelve unknown behalf beyond
bounty brains brings brook brows cares conduct cost dwell faint fairly fits hateful minute mischief month
offended peril practice prisoners prithee prize puts seeing sooth speaking tells temper thieves trade twain
warm weight whore affections bent bodies chaste convey dearly endoftext forbear horn horns knaves ladyship
lock marks minister modest numbers perforce press prevail prey prick profit quit receiv reverence revolt
school snow store substance sway violent weeds witch acquainted afterwards belly blown books conceit creatures
darkness debt dogs edge finds fingers firm forsooth groans guest maids midnight misery native nought peers
places prayer raise sentence smooth tame thinking utter villains wounded appetite armed barren betwixt
blessing borrow bride cease contempt cover dagger discover dish elder fatal fate fathers garden govern habit
lamb mild nights staff taking tied tread tribunes wants weapons apart banishment calm charm clothes condemn
council crack difference dispatch everything figure fruit groan hearted height huge impossible market months
odds parted repair sell until vantage virgin whoreson wither worn wrought afraid alike although bell chair
countrymen defence eternal fairer favours giving glove hazard heartily knit laws morn mountain mouths
necessity object purposes slaves slew sold sought suspect yond apparel began bind birds boast companion deer
devils flourish forces kindly knights length nobility pour princess remains roar runs sends silent sleeps suck
thereof thick vessel wing abide amiss beasts beauteous bite bottom cardinal castle cock compass delay despatch
dignity distance doctor esteem fallen falsehood familiar feeling grieve hanging hangs ignorance infinite
instrument language league monument nobles pause physic pick pitch pleasant pleasures promis rotten scape
scene serves skin stronger tall tarry twill unhappy unnatural wears also alter ambitious angels basket benefit
coat committed corn courtier dozen earthly envious fright furnish gall hardly isle jealousy lieutenant lusty
miserable moment moved north otherwise partly pieces rash rock sins special stays strain strife stroke subtle
sweat torch travel tyranny visage vouchsafe weather willing wolf attempt chase cool crow disdain enterprise
fairy felt fierce flow friendly higher humours inform island knowing leap marvel page passing promised punish
quench rail reading signs solemn surely unworthy weeps whisper wholesome willingly wondrous advise avoid bleed
breach bury calf chief conference confound discretion dress drew east example fifty growing hanged herald hole
mistake nation nobly ocean pace pack pate pomp received reward roses serpent services shadows slept sour spoil
stamp standing start stern stol terror toil troubled used woeful younger absent accuse appointed blunt cloud
commanded conquer deserv deserves disease drive exchange gait goose government guilt hail hairs jewels leads
lines looked merchant message naught offices parley passage perhaps perish petty pitiful pocket privilege
saucy sceptre seest senses sings sink stock tailor task tricks verse wedding wishes worm written yoke youthful
aboard alack allow banquet beloved caught cell cloak commit conquest couldst daily decay delicate eight fares
fore gather hostess interest inward judgement learning liking looking mourn nails nephew parting plays
possession praises purchase redress running savage seldom shade shoot shoulder siege space spur stream term
theirs thrown trees troops unfold veins waters west whip wills advance amongst beheld beholding blest bore
bravely chang cursed deceived dote expect foreign freedom giddy goddess graves guarded honor hunt invention
joyful kisses knot lesser loath loyal mile milk miss nice officers price rate rebels resolution score serv
shoulders soil stick sting stretch strive strongly suits sweetly torture usurp wisely zeal amen begun breaking
breeding check conclusion confirm confusion consul contented crying curses direct discharge drinking drums
easily faithful feather fields forfeit forty ghost granted grew hated hears henceforth injury invisible
journey joys kindred lately lights lower nimble observe opposite pawn peevish perchance physician preserve
recover redeem saint scope sets shown slay smiling swears telling tempt torment towns undo value wail week
wept whiles absolute accept aspect assurance audience band befall behaviour belov bleeding blot boot boots
breaks carried closet commands commons contents continue dame delivered destroy dove draws effects error
farther fearing flame gently hungry increase joint laughter level likes likewise lying mask melt metal
murderer needful palm perfection points prevent profess rapier reach rebellion remorse shapes ships sounded
spleen spurn step stolen stoop temple thirty tooth tremble wink working abus advis afeard afternoon altogether
answered apparent approve assur aunt beside bosoms bottle burns careful chastity chin corse cuckold current
curst deaf deceive defy eldest ended event forswear gaze haply human justly kingly lent liberal mutiny newly
notice obedient penny persuade phrase proportion provided refuse remove repose secure seize senators shook
stage stale strangely suspicion sweetest talking tend throats token troop ugly villainy withdraw yellow
actions addition aged assured beds beguile blue burst busy canker combat conclude conditions corrupt cowards
curs deceiv directly extremity forms grass grievous hall harsh houses imperial killed lightning livery
marching matters mettle mount offences provide quarter recompense renown satisfy seeks senseless shield shift
shines shrewd sitting slight society sole spit supply terrible theme turned urge venture vous wander works
wrack affect alarum apace arrest beams belike blushing censure cherish climb conceive contract couch deputy
doubtful dowry eaten enforce except expedition famous fever fleet forehead front garland grandam grandsire
guide husbands keen kissing lark lived lodge loyalty manage mightst miracle mothers natures nest pays pearl
perjur pinch pleasing poverty pursue rebel rescue resolv rouse secrets share signify sirs smoke steps stocks
strumpet suitor suppose swain swallow thereby trespass venom vulgar waking walks whipped wonderful wore access
allegiance amends amity amorous answers betimes breathing bush butcher ceremony choler compare conjure craves
creep crest date dearer deck dine dismiss doublet eagle evils exile falling flat fold goods greeting guiltless
hounds immortal innocence instruct keeping lament likely lodging luck manhood medicine moral mourning moves
moving noted owes park perpetual pierce prepar prosperous prov qualities ragged renowned rhyme riches rightly
rises river rush sadness sensible shun sights sisters south spread strikes stubborn tales touches trifle trunk
unjust virginity weakness wooing worms yesterday yielded according aloud arise babes backs beget beggars
bidding bread breeds build carries charg coats coin comforts determine division dukedom entrance flattery forc
forsake fourteen gallows guests hideous horrible hose injuries instance instantly keeper lays lift lions liver
load mass merrily methought ministers oracle passes poet proceeding rais raven requite resolve reveng roaring
royalty sacrifice safely scurvy semblance serious severally singing sleeve sober stirring stopp supposed tents
threw titles treachery unkind watery wheel willow wreck writes youngest accident afford amaz appeal boar bonds
bowels candle carriage changes character charms concerns deaths deceit direction divide earl elements
estimation fires flint game grieves hangman happily hasty heirs hung infant kingdoms lief likeness middle moan
monsieur mood peasant pine piteous plant players prais profession pronounce record rejoice require saved
scholar scratch scruple senate served shores sinews softly speeches steward strokes swearing swelling thin
trembling tried unkindness unseen upright varlet verses voyage ward weapon wenches wronged acts backward
barbarous beats brown cannon caps cave certainly clean coast conqueror converse corner crowned departure
design destiny discontent diseases disguised dispose distress divers drowned election evening evermore faction
fairies feeble grey grim harvest hedge herd inch infamy infection ladder lets linen loathsome locks lute
meddle miseries monarch narrow notes orchard perjury pledge process prologue promises punishment push rack
raging ranks reproach resolved robb robes rogues salute setting speedy stole straw strict sufferance sugar
swell treasons vanish vassal waves wipe worser adventure ancestors arriv bald bargain battles begot beware
bone bounds burial chid chosen cloth commodity complain complete compound confident correction courteous craft
create cruelty dainty dancing deserts diest divorce drift duties eleven escape exceeding excellence exercise
filthy flattering frail gilded governor hare harmony hatch heinous helm herein history hourly import integrity
intents joints killing kills knocks lads losing mankind marble marvellous merely messengers miles mongst
mountains nearer necessary neglect nightly ourself painting peep persons petition powerful praised prevented
prime reasonable reckoning reply resign rights rocks sadly scandal scorns shames sheets shining shoes silly
slip slumber steep stops stout style thankful thread utmost vanity villainous wanting whit writing admit
articles ashes attendants bachelor banks beastly begg blessings board bondage bootless brass broad built burnt
chose confession convenient coronation corrupted counsels coxcomb dangers demands deserved desir dismal dispos
drinks driven dwells elbow employment enmity errand executed expense fellowship fighting flock flout followed
forlorn frowns funeral gage gazing giant grain groom harms headed household imagine infect latter lungs madman
manly mantle minded mischance mistook multitude muster mystery neighbours noon nuptial ornament ought painter
penance pernicious persuaded pitied pleased prays precedent presume prodigal pursuit putting ravish rear
relish respects restore robe roof sails sickly signior silk silken sire soundly squire stake strew stuck
suffice tail tainted thousands trusty untimely velvet villany wakes wandering windows abhor ache acquaint
added afar affected amend article assay ballad beating belongs bending bethink bliss block bounteous bringing
buck bully charitable coal conceal concluded constancy counsellor countryman courses crept crime dealing
deserving despise devotion discord disturb divided eats execute experience extend feeds female fixed flatterer
fray function gentleness gilt grove growth hack harbour hates heap heaviness hire homage hush impatience
infected jests knavery knowest lame leaden leading lily limit liquor lofty longing mayor meanest minion
minutes mocks moiety mouse neat nigh ning nobler nobody observance obtain occasions parentage parliament
partner persuasion pilgrimage pillow pleases porter potent practise prefer presented provoke purge purpos race
removed reports reproof revenged revenue ribs rites rope sayest scatter shameful shoe smallest smother split
starve storms strangers suitors sums surety surfeit threat tribute trim vein vent violence visitation wager
waiting wedded weed welkin wilful winged wolves accent address agree amazed ambassador ample anointed arrant
ashamed baseness became beginning bells bereft bill bloods brace branch breakfast brethren bulk capable
careless casket coffin commends confidence cook couple cowardice crimes curious debts delights descent dislike
distemper doting dried drowsy drunken duchess empire enforced envoy exploit extreme famish fifteen forthwith
fortunate fountain garment gloves grossly hatred holding holp humility idly impatient lacks lamentable lasting
limb mart meed merciful mightily motive murderous murders oppression outlive overthrow papers passions plainly
playing plight politic prepared profane prosper quarrels rascals rated region religious rend rings rising
scarcely settled skull stead stool sullen sung survey sustain talents theft thereto thorns threaten threats
throng tire turning tutor undergo walking warriors weal witchcraft worthless yielding accursed accus affords
agreed alms aloof apply apprehend arch assault assist
""".split()


if __name__ == "__main__":
    text = open(sys.argv[1] if len(sys.argv) > 1 else "data/corpus/train.txt", encoding="utf-8").read()
    print(" ".join(corpus_words(text)))
